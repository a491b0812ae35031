// The replay cache: every job id (jti) that passed verification, remembered until its expiry, kept in
// AGENT_STATE_DIR so that a restart does not reopen the window.
//
// Format: `replay-cache.jsonl`, one `{"jti":"<uuid>","until":<seconds>}` per line, appended and fsynced
// before the job runs (so a jti counts as used even when the kernel then fails, or the agent dies).
// Opening reads it back, ignores a torn last line (a crash in the middle of an append), drops expired
// entries and rewrites the file atomically; later, whenever the log holds far more lines than live
// entries, it is rewritten the same way. Entries live at most exp + 30 s, so the file stays small.
import { constants as fsConstants } from 'node:fs';
import { open, readFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { ensureDir, writeFileAtomic } from './atomic-file.ts';
import type { ReplayGuard } from './verify.ts';

export const REPLAY_FILE = 'replay-cache.jsonl';

export interface ReplayCacheOptions {
  /** Seconds since the epoch. */
  now?: () => number;
  /** Called with a description of lines that could not be read back (never fatal). */
  warn?: (msg: string, fields?: Record<string, unknown>) => void;
  /** Rewrite the log when it has this many more lines than live entries (default 1000). */
  compactSlack?: number;
}

const systemNow = () => Date.now() / 1000;

export class ReplayCache implements ReplayGuard {
  readonly path: string;
  private readonly entries = new Map<string, number>();
  private readonly now: () => number;
  private readonly slack: number;
  private fh: FileHandle | undefined;
  private lines = 0;
  /** Serialises appends and rewrites. */
  private chain: Promise<unknown> = Promise.resolve();
  private nextPrune = 0;

  private constructor(path: string, opts: ReplayCacheOptions) {
    this.path = path;
    this.now = opts.now ?? systemNow;
    this.slack = opts.compactSlack ?? 1000;
  }

  static async open(stateDir: string, opts: ReplayCacheOptions = {}): Promise<ReplayCache> {
    await ensureDir(stateDir);
    const cache = new ReplayCache(join(stateDir, REPLAY_FILE), opts);
    let text = '';
    try {
      text = await readFile(cache.path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    const now = cache.now();
    let unreadable = 0;
    for (const line of text.split('\n')) {
      if (line.trim() === '') continue;
      try {
        const { jti, until } = JSON.parse(line) as { jti?: unknown; until?: unknown };
        if (typeof jti !== 'string' || typeof until !== 'number') throw new Error('bad entry');
        if (until > now && until > (cache.entries.get(jti) ?? 0)) cache.entries.set(jti, until);
      } catch {
        unreadable++;
      }
    }
    if (unreadable > 0) opts.warn?.('replay cache: skipped unreadable lines', { path: cache.path, lines: unreadable });
    await cache.rewrite();
    return cache;
  }

  /** Number of remembered, unexpired jtis. */
  get size(): number {
    this.prune(true);
    return this.entries.size;
  }

  has(jti: string): boolean {
    const until = this.entries.get(jti.toLowerCase());
    return until !== undefined && until > this.now();
  }

  use(jti: string, until: number): Promise<boolean> {
    const key = jti.toLowerCase();
    this.prune(false);
    const seen = this.entries.get(key);
    if (seen !== undefined && seen > this.now()) return Promise.resolve(false);
    // Recorded in memory at once (a concurrent twin sees it), on disk before the caller goes on.
    this.entries.set(key, until);
    return this.serial(async () => {
      const fh = this.fh;
      if (!fh) throw new Error('replay cache is closed');
      await fh.write(`${JSON.stringify({ jti: key, until })}\n`);
      await fh.datasync();
      this.lines++;
      if (this.lines > this.entries.size + this.slack) await this.rewriteNow();
      return true;
    });
  }

  async close(): Promise<void> {
    await this.serial(async () => {
      await this.fh?.close();
      this.fh = undefined;
    });
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(fn, fn);
    this.chain = run.catch(() => undefined);
    return run;
  }

  private prune(force: boolean): void {
    const now = this.now();
    if (!force && now < this.nextPrune) return;
    this.nextPrune = now + 10;
    for (const [jti, until] of this.entries) if (until <= now) this.entries.delete(jti);
  }

  private rewrite(): Promise<void> {
    return this.serial(() => this.rewriteNow());
  }

  /** Writes the live entries to a fresh file, swaps it in, and appends to it from then on. */
  private async rewriteNow(): Promise<void> {
    this.prune(true);
    const body = [...this.entries].map(([jti, until]) => `${JSON.stringify({ jti, until })}\n`).join('');
    await this.fh?.close();
    this.fh = undefined;
    await writeFileAtomic(this.path, body, 0o600);
    this.fh = await open(this.path, fsConstants.O_WRONLY | fsConstants.O_APPEND);
    this.lines = this.entries.size;
  }
}
