// Module hooks for loader/register.mjs: transpile .ts (not under node_modules) on load.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { transformSync } from 'rolldown/utils';

export const OPTIONS = {
  lang: 'ts',
  sourceType: 'module',
  sourcemap: true,
  decorator: { legacy: true, emitDecoratorMetadata: true },
  typescript: { onlyRemoveTypeImports: false },
};

export async function load(url, context, nextLoad) {
  if (!url.startsWith('file:') || !url.endsWith('.ts') || url.includes('/node_modules/')) return nextLoad(url, context);
  const filename = fileURLToPath(url);
  const source = await readFile(filename, 'utf8');
  const out = transformSync(filename, source, OPTIONS);
  if (out.errors?.length) {
    const first = out.errors[0];
    throw new SyntaxError(`${filename}: ${first.message ?? String(first)}`);
  }
  const map = out.map ? `\n//# sourceMappingURL=data:application/json;base64,${Buffer.from(JSON.stringify(out.map)).toString('base64')}` : '';
  return { format: 'module', source: out.code + map, shortCircuit: true };
}
