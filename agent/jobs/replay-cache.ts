// The replay cache: every job id (jti) that passed verification, remembered until its expiry, kept in
// AGENT_STATE_DIR so that a restart does not reopen the window.
//
// Format: `replay-cache.jsonl`, a journal (housekeeping/journal.ts) of `{"jti":"<uuid>","until":<seconds>}`
// lines, each appended and fsynced before the job runs (so a jti counts as used even when the kernel then
// fails, or the agent dies). Opening reads it back, skips a torn last line, drops expired entries and
// rewrites the file; later, whenever it holds far more lines than live entries, it is rewritten the same
// way. Entries live at most exp + 30 s, so the file stays small.
import { Journal } from '../housekeeping/journal.ts';
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

interface Entry {
  jti: string;
  until: number;
}

const systemNow = () => Date.now() / 1000;

function accept(v: unknown): Entry | undefined {
  const e = v as Partial<Entry> | null;
  return e && typeof e.jti === 'string' && typeof e.until === 'number' ? { jti: e.jti, until: e.until } : undefined;
}

export class ReplayCache implements ReplayGuard {
  private readonly entries = new Map<string, number>();
  private readonly now: () => number;
  private readonly slack: number;
  private nextPrune = 0;

  private constructor(
    private readonly journal: Journal<Entry>,
    opts: ReplayCacheOptions,
  ) {
    this.now = opts.now ?? systemNow;
    this.slack = opts.compactSlack ?? 1000;
  }

  static async open(stateDir: string, opts: ReplayCacheOptions = {}): Promise<ReplayCache> {
    const { journal, lines, unreadable } = Journal.open(stateDir, REPLAY_FILE, accept);
    const cache = new ReplayCache(journal, opts);
    const now = cache.now();
    for (const { jti, until } of lines) if (until > now && until > (cache.entries.get(jti) ?? 0)) cache.entries.set(jti, until);
    if (unreadable > 0) opts.warn?.('replay cache: skipped unreadable lines', { path: journal.path, lines: unreadable });
    cache.rewrite();
    return cache;
  }

  get path(): string {
    return this.journal.path;
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

  async use(jti: string, until: number): Promise<boolean> {
    const key = jti.toLowerCase();
    this.prune(false);
    const seen = this.entries.get(key);
    if (seen !== undefined && seen > this.now()) return false;
    // On disk before the caller goes on; in memory only once it is (a failed write refuses the job, and
    // must not leave the jti looking used).
    this.journal.append([{ jti: key, until }]);
    this.entries.set(key, until);
    if (this.journal.lineCount > this.entries.size + this.slack) this.rewrite();
    return true;
  }

  async close(): Promise<void> {
    this.journal.close();
  }

  private prune(force: boolean): void {
    const now = this.now();
    if (!force && now < this.nextPrune) return;
    this.nextPrune = now + 10;
    for (const [jti, until] of this.entries) if (until <= now) this.entries.delete(jti);
  }

  /** Writes only the live entries. */
  private rewrite(): void {
    this.prune(true);
    this.journal.rewrite([...this.entries].map(([jti, until]) => ({ jti, until })));
  }
}
