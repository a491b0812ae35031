// The browser tests run against the BUILT panel, as the gateway serves it (panel/dist): before a test file
// starts its gateway, the panel is built when dist/ is missing or older than anything it is built from
// (its sources, its build script and codegen settings, the GraphQL schema its operations are typed from).
// Test files run in parallel processes, so the build is taken under a lock directory: one file builds, the
// others wait for it and then find dist/ fresh. panel/build/build.mjs writes dist/ by renaming a finished
// temporary directory, so a gateway never serves half a build.
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { until } from './wait.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const PANEL = path.join(ROOT, 'panel');
/** Written last by the build (after index.html and every asset): its time is the build's. */
const STAMP = path.join(PANEL, 'dist/build.json');
const INPUTS = [path.join(PANEL, 'src'), path.join(PANEL, 'build'), path.join(PANEL, 'codegen.config.mjs'), path.join(PANEL, 'package.json'), path.join(ROOT, 'schema/schema.graphql')];
/** The codegen output lives in src/ but is written by the build itself: it never makes dist/ stale. */
const GENERATED = path.join(PANEL, 'src/graphql/generated.ts');
const LOCK = path.join(tmpdir(), `tunnelgate-panel-build-${Buffer.from(ROOT).toString('base64url').slice(-24)}.lock`);
/** A cold build (codegen, tsc, rolldown, brotli) on a loaded 2-core host: a bound on a hang, not a timing. */
const BUILD_BOUND_MS = 600_000;

function newestMtime(p: string): number {
  if (p === GENERATED) return 0;
  const st = statSync(p, { throwIfNoEntry: false });
  if (!st) return 0;
  if (!st.isDirectory()) return st.mtimeMs;
  return readdirSync(p).reduce((m, name) => Math.max(m, newestMtime(path.join(p, name))), st.mtimeMs);
}

/** Why the panel must be built now, or null when panel/dist is newer than everything it is built from. */
export function panelStale(): string | null {
  const built = statSync(STAMP, { throwIfNoEntry: false })?.mtimeMs;
  if (built === undefined) return 'panel/dist is missing';
  const newest = Math.max(...INPUTS.map(newestMtime));
  return newest > built ? 'panel/src (or the schema, or the build script) changed since panel/dist was built' : null;
}

/** Whether the lock directory was left by a process that is gone (killed mid-build); a lock without its pid yet is live. */
function lockAbandoned(): boolean {
  let pid: number;
  try {
    pid = Number(readFileSync(path.join(LOCK, 'pid'), 'utf8'));
  } catch {
    return false;
  }
  try {
    process.kill(pid, 0);
    return false;
  } catch {
    return true;
  }
}

/** Builds the panel (panel/build/build.mjs `buildPanel`) unless panel/dist is fresh; one build at a time. */
export async function ensurePanelBuilt(): Promise<void> {
  if (!panelStale()) return;
  // Another test file may be building: wait for its lock (taking over one a killed process left).
  await until('the panel build lock', () => {
    try {
      mkdirSync(LOCK);
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    if (lockAbandoned()) rmSync(LOCK, { recursive: true, force: true });
    return false;
  }, BUILD_BOUND_MS);
  try {
    writeFileSync(path.join(LOCK, 'pid'), String(process.pid));
    const why = panelStale();
    if (!why) return;
    process.stderr.write(`browser tests: building the panel (${why})\n`);
    const { buildPanel } = (await import(pathToFileURL(path.join(PANEL, 'build/build.mjs')).href)) as { buildPanel: () => Promise<void> };
    await buildPanel();
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
}
