// How the edge agent's Node process is started, in one place: the entry (tunnel-agent.mjs), the npm
// script, the systemd unit and the agent benchmark all use these flags and load the agent with loadAgent()
// (a test checks that the unit and the script carry exactly AGENT_NODE_FLAGS).
//
// Why these V8 flags: with 10,000 tunnels the agent's live heap is ~15 MB, but reading and changing them
// all makes V8 grow its heap to several times that between full collections, and the pages it grew to
// stay resident. A 1 MB semi-space (in-flight netlink requests are promoted less far, young garbage goes
// sooner) and a 10% heap-growing step (a full collection comes before the heap has grown far) lower that
// peak; --expose-gc lets the dataplane give the pooled pages back after a large operation
// (agent/housekeeping/memory.ts). Figures: bench/agent.ts, and docs/ARCHITECTURE.md.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const AGENT_NODE_FLAGS = ['--max-semi-space-size=1', '--heap-growing-percent=10', '--expose-gc'];

/** The loader that runs the agent's TypeScript in its own thread (no separate loader isolate). */
export const AGENT_LOADER = new URL('../../loader/register-inline.mjs', import.meta.url);

// The prebuilt bundle (agent/bin/bundle.mjs builds it): the agent as plain JavaScript, so the process
// carries no transpiler (~20 MB less). Not in git; `npm install` builds it.
export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const BUNDLE_DIR = fileURLToPath(new URL('../dist/', import.meta.url));
export const BUNDLE = join(BUNDLE_DIR, 'agent.mjs');
export const BUNDLE_MANIFEST = join(BUNDLE_DIR, 'agent.json');
const BUILDER = fileURLToPath(new URL('./bundle.mjs', import.meta.url));

/** SHA-256 of a file's bytes (or of the bytes given), base64url. */
export function digestOf(pathOrBytes) {
  return createHash('sha256').update(typeof pathOrBytes === 'string' ? readFileSync(pathOrBytes) : pathOrBytes).digest('base64url');
}

/**
 * Why the bundle cannot be used as it is, or null when it can: it exists, is what its manifest says was
 * built, and every input it was built from (our modules, the builder, tsconfig.json) is unchanged. An edit
 * that imports a new module changes the importing one, so no new input goes unseen. The paths are for tests.
 */
export function bundleStaleness({ manifestPath = BUNDLE_MANIFEST, bundlePath = BUNDLE, root = REPO_ROOT } = {}) {
  const digestOrNull = (path) => {
    try {
      return digestOf(path);
    } catch {
      return null;
    }
  };
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
  } catch {
    return 'not built';
  }
  const inputs = Object.entries(manifest?.inputs ?? {});
  if (inputs.length === 0) return 'its manifest lists no inputs';
  const output = digestOrNull(bundlePath);
  if (output === null) return 'not built';
  if (output !== manifest.output) return `${relative(root, bundlePath)} differs from its manifest`;
  for (const [path, digest] of inputs) if (digestOrNull(join(root, path)) !== digest) return `${path} changed since it was built`;
  return null;
}

/**
 * The agent's modules (agent/main.ts's exports), as production runs them: from the bundle, rebuilt first
 * (in a child process, so this one never loads the bundler) when a source changed; from the sources
 * through the in-thread loader only when it cannot be rebuilt here, with a warning on stderr.
 * `warn` receives that warning (tests); `allowRebuild: false` never writes (a read-only install).
 */
export async function loadAgent({ warn = (m) => process.stderr.write(`${m}\n`), allowRebuild = true } = {}) {
  let stale = bundleStaleness();
  if (stale !== null && allowRebuild) {
    const r = spawnSync(process.execPath, [BUILDER], { encoding: 'utf8', timeout: 120_000, stdio: ['ignore', 'ignore', 'pipe'] });
    stale = r.status === 0 ? bundleStaleness() : `${stale}, and rebuilding it failed: ${(r.stderr || r.error?.message || `exit ${r.status}`).trim().split('\n').slice(-1)[0]}`;
  }
  if (stale === null) return import(pathToFileURL(BUNDLE).href);
  warn(`tunnel-agent: the prebuilt bundle is not usable (${stale}); running from the TypeScript sources, which costs ~20 MB more memory. Rebuild it with: node agent/bin/bundle.mjs`);
  await import(AGENT_LOADER.href);
  return import(new URL('../main.ts', import.meta.url).href);
}

/** Whether this process was started with every one of AGENT_NODE_FLAGS. */
export function hasAgentFlags(execArgv = process.execArgv) {
  return AGENT_NODE_FLAGS.every((f) => execArgv.includes(f));
}
