// `npm install`'s `prepare` step (package.json): gets a checkout ready to run.
// - The agent's prebuilt bundle (agent/bin/bundle.mjs), as before this script existed.
// - The customer panel's static files (panel/dist, served by server/http/panel.ts): built with
//   `npm run build:panel` when the panel's build tools are installed (a development checkout, the image's
//   build stage). When they are not (`npm ci --omit=dev`: a production install that ships a built panel,
//   or an edge router that installs the agent alone) the step is skipped and whatever panel/dist holds is
//   kept; it says so in one line only when there is no built panel at all.
//
// The panel's build tools are its devDependencies (panel/package.json): the panel ships as static files,
// so nothing it builds from is needed at run time, and `--omit=dev` leaves all of them out.
//
// Plain JavaScript with node: imports only: npm may run it with whatever Node is first on PATH.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** The package.json at `file` as an object, or null when it is missing or unreadable. */
function readJson(file) {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    return null;
  }
}

/** Whether package `name` is installed where Node would find it from `dir` (its node_modules, then each parent's up to `root`). */
function installed(name, dir, root) {
  for (let d = dir; ; d = dirname(d)) {
    if (existsSync(join(d, 'node_modules', name, 'package.json'))) return true;
    if (d === root || dirname(d) === d) return false;
  }
}

/**
 * What `prepare` does in the checkout at `root`:
 * - agent: whether to build the agent bundle (its builder is there);
 * - panel: `build` (tools installed), `kept` (no tools, a built panel is there), `missing` (no tools,
 *   nothing built: the gateway will say so at `/`), or `none` (this checkout has no panel).
 * `missingTools` names the build tools not installed, for the one line `missing` prints.
 */
export function plan(root) {
  const agent = existsSync(join(root, 'agent/bin/bundle.mjs'));
  const pkg = readJson(join(root, 'panel/package.json'));
  const rootPkg = readJson(join(root, 'package.json'));
  if (pkg === null || typeof rootPkg?.scripts?.['build:panel'] !== 'string') return { agent, panel: 'none', missingTools: [] };
  const tools = Object.keys(pkg.devDependencies ?? {});
  const missingTools = tools.filter((name) => !installed(name, join(root, 'panel'), root));
  // No devDependencies declared: nothing tells a development checkout from a production one, so build
  // only when there is no build yet (the build itself then fails loudly if it cannot run).
  const built = existsSync(join(root, 'panel/dist/index.html'));
  if (tools.length > 0 ? missingTools.length === 0 : !built) return { agent, panel: 'build', missingTools };
  return { agent, panel: built ? 'kept' : 'missing', missingTools };
}

/** Runs `node <args>` or `npm <args>` in `root`, its output on ours; exits with its status when it fails. */
function run(root, what, args) {
  // npm sets npm_execpath for its scripts: the same npm, run by the same Node, builds the panel.
  const npm = process.env.npm_execpath;
  const [cmd, argv] = what === 'node' ? [process.execPath, args] : npm ? [process.execPath, [npm, ...args]] : ['npm', args];
  const r = spawnSync(cmd, argv, { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) {
    process.stderr.write(`prepare: ${what} ${args.join(' ')} failed (${r.error ? r.error.message : `exit ${r.status ?? r.signal}`})\n`);
    process.exit(r.status || 1);
  }
}

export function prepare(root = ROOT) {
  const p = plan(root);
  if (p.agent) run(root, 'node', ['agent/bin/bundle.mjs']);
  if (p.panel === 'build') run(root, 'npm', ['run', 'build:panel']);
  if (p.panel === 'missing') {
    process.stderr.write(`prepare: the panel is not built and its build tools are not installed (${p.missingTools.join(', ')}); the gateway will say so at / (npm install, then npm run build:panel)\n`);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) prepare();
