// `node agent/bin/bundle.mjs`: builds the agent's prebuilt bundle, agent/dist/agent.mjs (agent/main.ts
// and every module of ours it imports, as one plain-JavaScript file; npm packages stay external), and its
// manifest, agent/dist/agent.json (a digest of every input, for runtime.mjs's freshness check).
//
// Why: run from its TypeScript sources, the agent carries an in-thread transpiler (rolldown's native
// binding) for its whole life: ~20 MB of its < 150 MB budget (docs/ARCHITECTURE.md, agent/dist). `npm install`
// builds the bundle (the `prepare` script); the entry rebuilds it when a source changed since.
//
// Imports rolldown, so it is a script of its own: the agent's entry only reads the manifest.
import { mkdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'rolldown';
import { BUNDLE, BUNDLE_DIR, BUNDLE_MANIFEST, REPO_ROOT, digestOf } from './runtime.mjs';

const ENTRY = fileURLToPath(new URL('../main.ts', import.meta.url));

/** Builds the bundle and its manifest; returns the manifest. */
export async function buildAgentBundle() {
  const started = Date.now();
  // The builder and the tsconfig.json rolldown takes its TypeScript options from are inputs too.
  const inputs = new Set([fileURLToPath(import.meta.url), join(REPO_ROOT, 'tsconfig.json')]);
  const out = await build({
    input: ENTRY,
    platform: 'node',
    // Only our own modules go in: npm packages (ssh2, koffi, jose) and Node's own are imported at run time,
    // from the same node_modules the agent would use when run from its sources.
    external: (id, importer) => importer !== undefined && !id.startsWith('.') && !id.startsWith('/'),
    treeshake: true,
    plugins: [
      {
        name: 'tunnelgate-inputs',
        // Every module of the graph, tree-shaken or not: an edit to any of them makes the bundle stale.
        buildEnd() {
          for (const id of this.getModuleIds()) if (id.startsWith('/')) inputs.add(id);
        },
      },
    ],
    output: {
      format: 'esm',
      // One file: main.ts's lazy import of the dataplane would otherwise become a chunk of its own.
      codeSplitting: false,
      // Read only when the agent runs with source maps on (TUNNEL_AGENT_SOURCE_MAPS=1, tunnel-agent.mjs).
      sourcemap: true,
      file: BUNDLE,
    },
    write: false,
  });
  const chunk = out.output.find((o) => o.type === 'chunk');
  if (!chunk) throw new Error('rolldown produced no chunk');
  const map = out.output.find((o) => o.type === 'asset' && o.fileName.endsWith('.map'));
  const { code } = chunk;
  // A source written while rolldown ran (a `git pull` beside a start) may be in the manifest's digests but not in
  // the bundle: refuse, rather than vouch for code the bundle does not hold. The next start builds again.
  const changed = [...inputs].filter((p) => statSync(p).mtimeMs > started);
  if (changed.length > 0) throw new Error(`sources changed during the build: ${changed.map((p) => relative(REPO_ROOT, p)).join(', ')}`);
  const manifest = {
    built: new Date().toISOString(),
    output: digestOf(Buffer.from(code)),
    inputs: Object.fromEntries([...inputs].sort().map((p) => [relative(REPO_ROOT, p), digestOf(p)])),
  };
  mkdirSync(BUNDLE_DIR, { recursive: true });
  // Written aside and renamed into place: agents started at the same moment may build at the same time,
  // and none may import a half-written file. The manifest goes last: it vouches for the bundle beside it.
  const put = (path, data) => {
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, data);
    renameSync(tmp, path);
  };
  if (map) put(`${BUNDLE}.map`, typeof map.source === 'string' ? map.source : Buffer.from(map.source));
  put(BUNDLE, code);
  put(BUNDLE_MANIFEST, `${JSON.stringify(manifest, null, 2)}\n`);
  return manifest;
}

// Not import.meta.main: npm's `prepare` may run this under an older system Node, which lacks it.
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const manifest = await buildAgentBundle();
  process.stdout.write(`agent bundle: ${relative(process.cwd(), BUNDLE)} from ${Object.keys(manifest.inputs).length} files\n`);
}
