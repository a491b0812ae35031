// The previous release's code, taken from git history, for the upgrade test (docs/RELEASES.md "The
// upgrade test"). release/previous.json names the release and its commit; materialisePreviousRelease()
// extracts that commit's tree (`git archive`) into a temporary directory and links this checkout's
// node_modules into it, so its gateway, admin CLI and agent run from their own sources through their own
// loader (loader/register.mjs), on this checkout's Node.
//
// That is only the release as it was if its dependencies are the ones installed here: every package the
// release's package-lock.json pins must be installed here exactly as pinned. A package this checkout added
// (a new tool) is no difference: the old code never imports it. Otherwise it stops and says so, rather than
// run old code on new dependencies without anyone knowing.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '../..');

/** release/previous.json: the release this one upgrades from. */
export interface PreviousRecord {
  version: string;
  commit: string;
}

export interface PreviousRelease extends PreviousRecord {
  /** The extracted tree (its node_modules links to this checkout's). */
  root: string;
  /** Deletes the extracted tree. */
  remove(): void;
}

/** What the upgrade test runs of the previous release, each from its own tree. */
export const PREVIOUS_RELEASE_ENTRIES = ['loader/register.mjs', 'server/main.ts', 'server/cli/admin.ts', 'agent/ssh/keys.ts', 'test/helpers/agent-process.ts'] as const;

export function readPreviousRecord(root = ROOT): PreviousRecord {
  const record = JSON.parse(readFileSync(join(root, 'release/previous.json'), 'utf8')) as Partial<PreviousRecord>;
  if (typeof record.version !== 'string' || typeof record.commit !== 'string' || !/^[0-9a-f]{40}$/.test(record.commit)) {
    throw new Error(`release/previous.json must be {"version": "x.y.z", "commit": "<40 hex digits>"}, not ${JSON.stringify(record)}`);
  }
  return { version: record.version, commit: record.commit };
}

interface Lockfile {
  version?: string;
  packages?: Record<string, { version?: string } & Record<string, unknown>>;
  [key: string]: unknown;
}

/** Stable text of a JSON value (object keys sorted), for comparing lockfile entries. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

/**
 * The installed packages the previous release's package-lock.json pins that this one installs otherwise or
 * not at all: `packages` keys such as `node_modules/koa`. The project's own entries (the root and each
 * workspace: their versions and dependency lists) are set aside, since what they depend on is pinned by the
 * `node_modules/...` entries themselves; packages only this checkout installs are no difference. Empty
 * when every dependency of the release is installed here as it was released.
 */
export function lockfileDifferences(previous: Lockfile, current: Lockfile): string[] {
  const workspaces = new Set(['', ...((current.packages?.['']?.workspaces as string[] | undefined) ?? []), ...((previous.packages?.['']?.workspaces as string[] | undefined) ?? [])]);
  const strip = (lock: Lockfile): Lockfile => {
    const { version: _ignored, packages = {}, ...rest } = lock;
    const out: Record<string, unknown> = {};
    for (const [key, entry] of Object.entries(packages)) {
      if (workspaces.has(key)) {
        const { version: _own, ...kept } = entry;
        out[key] = kept;
      } else {
        out[key] = entry;
      }
    }
    return { ...rest, packages: out as Lockfile['packages'] };
  };
  const a = strip(previous);
  const b = strip(current);
  const differences: string[] = [];
  for (const key of Object.keys(a.packages!)) {
    if (workspaces.has(key)) continue;
    if (canonical(a.packages![key]) !== canonical(b.packages![key])) differences.push(`packages["${key}"]`);
  }
  return differences.sort();
}

function git(root: string, args: string[]): string {
  return execFileSync('git', ['-C', root, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 256 * 1024 * 1024 });
}

/**
 * Checks that the previous release's commit is in this clone's history and that its lockfile installs what
 * this checkout has; throws saying what to do otherwise.
 */
export function checkPreviousRelease(record: PreviousRecord, root = ROOT): void {
  const name = `the previous release ${record.version} (commit ${record.commit}, release/previous.json)`;
  try {
    git(root, ['rev-parse', '--git-dir']);
  } catch {
    throw new Error(`${name} is read from git history, but ${root} is not a git checkout: run the upgrade test in a clone of the repository`);
  }
  const found = spawnSync('git', ['-C', root, 'cat-file', '-e', `${record.commit}^{commit}`], { stdio: 'ignore' }).status === 0;
  if (!found) {
    const shallow = git(root, ['rev-parse', '--is-shallow-repository']).trim() === 'true';
    throw new Error(
      shallow
        ? `${name} is not in this clone's history: the clone is shallow. Run \`git fetch --unshallow\` (CI clones fully) and run the test again`
        : `${name} is not in this repository's history: fetch it (\`git fetch origin ${record.commit}\`), or correct release/previous.json`,
    );
  }
  const previousLock = JSON.parse(git(root, ['show', `${record.commit}:package-lock.json`])) as Lockfile;
  const currentLock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as Lockfile;
  const differences = lockfileDifferences(previousLock, currentLock);
  if (differences.length > 0) {
    throw new Error(
      `${name} pins other dependencies than this checkout (package-lock.json differs in ${differences.slice(0, 10).join(', ')}` +
        `${differences.length > 10 ? ` and ${differences.length - 10} more` : ''}): its code would run on dependencies it was not released with. ` +
        'The upgrade test links this checkout\'s node_modules into the old tree; with different dependencies it must install the release\'s own ' +
        '(npm ci in the extracted tree) instead: change test/upgrade/previous-release.ts to do that',
    );
  }
}

/** Extracts the previous release (checked first: checkPreviousRelease) into a temporary directory. */
export function materialisePreviousRelease(opts: { root?: string; record?: PreviousRecord } = {}): PreviousRelease {
  const root = opts.root ?? ROOT;
  const record = opts.record ?? readPreviousRecord(root);
  checkPreviousRelease(record, root);
  const dir = mkdtempSync(join(tmpdir(), `tg-release-${record.version}-`));
  try {
    const tar = spawnSync('git', ['-C', root, 'archive', '--format=tar', record.commit], { maxBuffer: 1 << 30 });
    if (tar.status !== 0) throw new Error(`git archive ${record.commit} failed: ${String(tar.stderr)}`);
    execFileSync('tar', ['-x', '-C', dir], { input: tar.stdout, stdio: ['pipe', 'ignore', 'pipe'] });
    symlinkSync(realpathSync(join(root, 'node_modules')), join(dir, 'node_modules'), 'dir');
    const version = (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version?: string }).version;
    if (version !== record.version) {
      throw new Error(`release/previous.json says commit ${record.commit} is ${record.version}, but its package.json says ${version}: correct the record`);
    }
    const missing = PREVIOUS_RELEASE_ENTRIES.filter((f) => !existsSync(join(dir, f)));
    if (missing.length > 0) {
      throw new Error(`the previous release ${record.version} has no ${missing.join(', ')}, which the upgrade test runs from its tree: adapt test/upgrade/ to how that release starts`);
    }
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return { ...record, root: dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
