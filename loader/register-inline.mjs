// `node --import ./loader/register-inline.mjs file.ts`: the same TypeScript transform as register.mjs,
// but run in this thread (module.registerHooks, synchronous) rather than on Node's separate loader
// thread, which carries a V8 heap of its own for the life of the process. For long-running processes
// whose memory counts: the edge agent (measured ~26 MB less RSS).
// node-version.mjs first: an older Node stops there with a message. A named import of registerHooks
// (Node 22.15 and later) would fail while linking, before any module's code runs, so node:module comes
// in whole and rolldown only after the check.
import './node-version.mjs';
import { readFileSync } from 'node:fs';
import nodeModule from 'node:module';
import { fileURLToPath } from 'node:url';

const { transformSync } = await import('rolldown/utils');
const { OPTIONS } = await import('./hooks.mjs');

// Without --enable-source-maps (or process.setSourceMapsEnabled) nothing reads the maps: skip them, as
// their text would stay in memory with each module's source.
const options = process.sourceMapsEnabled ? OPTIONS : { ...OPTIONS, sourcemap: false };

nodeModule.registerHooks({
  load(url, context, nextLoad) {
    if (!url.startsWith('file:') || !url.endsWith('.ts') || url.includes('/node_modules/')) return nextLoad(url, context);
    const filename = fileURLToPath(url);
    const out = transformSync(filename, readFileSync(filename, 'utf8'), options);
    if (out.errors?.length) {
      const first = out.errors[0];
      throw new SyntaxError(`${filename}: ${first.message ?? String(first)}`);
    }
    const map = out.map ? `\n//# sourceMappingURL=data:application/json;base64,${Buffer.from(JSON.stringify(out.map)).toString('base64')}` : '';
    return { format: 'module', source: out.code + map, shortCircuit: true };
  },
});
