// The one way the agent keeps state that must survive a crash (AGENT_STATE_DIR): an append-only file of
// JSON lines. The replay cache (jobs/replay-cache.ts) and the dataplane's records (dataplane/state.ts) both
// sit on it.
//  - append: the lines, then fdatasync, before the caller goes on (a job's id counts as used, what the
//    gateway asked for is on record, before anything depends on it). An owner whose lines describe only
//    kernel state may append without the fdatasync (`durable: false`): the write is in the page cache before
//    the caller goes on, so it survives the agent's crash or kill; what a crash of the machine can take
//    back (the last seconds not yet written back) described links and elements that crash took too. The
//    next durable append or compaction of that file makes them durable as well (one file, in order);
//  - torn tail: a crash in the middle of an append leaves a partial last line; reading back skips any line
//    that is not JSON its owner accepts, and counts it;
//  - compaction: the owner rewrites the live lines when the file has grown well past them: a new file,
//    fsync, rename over the old one, fsync of the directory, so a crash leaves the old file or the new;
//  - the directory itself (0700) is fsynced when the file is first created.
// Synchronous on purpose: each append is one small write and a datasync of a file in the agent's own
// directory, and jobs and dataplane operations are already one at a time; no other work waits behind it
// long enough to be worth a thread hop.
import { closeSync, fdatasyncSync, openSync, readFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { ensureDir, fsyncDir, replaceFile } from './files.ts';
import { activity } from './activity.ts';

/** Lines per write(): 10,000 records as one string were ~5 MB of transient heap at the agent's peak. */
const WRITE_CHUNK = 512;

function writeLines<L>(fd: number, lines: readonly L[]): void {
  for (let i = 0; i < lines.length; i += WRITE_CHUNK) {
    let text = '';
    for (const l of lines.slice(i, i + WRITE_CHUNK)) text += `${JSON.stringify(l)}\n`;
    writeSync(fd, text);
  }
}

export interface OpenedJournal<L> {
  journal: Journal<L>;
  /** The lines read back, in order (unreadable ones left out). */
  lines: L[];
  /** Lines that were not JSON, or that `accept` refused: a torn tail, or damage. */
  unreadable: number;
}

export class Journal<L> {
  private fd: number;
  private count: number;

  private constructor(
    readonly dir: string,
    readonly path: string,
    fd: number,
    count: number,
  ) {
    this.fd = fd;
    this.count = count;
  }

  /**
   * Opens (creating it when missing) `dir/file` and reads it back. `accept` turns a parsed JSON value into a
   * line, or returns undefined for one it does not recognise.
   */
  static open<L>(dir: string, file: string, accept: (value: unknown) => L | undefined): OpenedJournal<L> {
    ensureDir(dir);
    const path = join(dir, file);
    let text = '';
    let existed = true;
    try {
      text = readFileSync(path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      existed = false;
    }
    const lines: L[] = [];
    let unreadable = 0;
    for (const raw of text.split('\n')) {
      if (raw.trim() === '') continue;
      let line: L | undefined;
      try {
        line = accept(JSON.parse(raw));
      } catch {
        line = undefined;
      }
      if (line === undefined) unreadable++;
      else lines.push(line);
    }
    const fd = openSync(path, 'a', 0o600);
    if (!existed) fsyncDir(dir);
    return { journal: new Journal<L>(dir, path, fd, lines.length + unreadable), lines, unreadable };
  }

  /** Lines in the file, the unreadable ones included: the owner compares it with its live set to compact. */
  get lineCount(): number {
    return this.count;
  }

  /**
   * Appends the lines: written, then fdatasync (durable, the default); `durable: false` only writes them (the
   * page cache: survives the process, not a crash of the machine; see the header).
   */
  append(lines: readonly L[], opts: { durable?: boolean } = {}): void {
    if (lines.length === 0) return;
    if (this.fd < 0) throw new Error(`journal ${this.path} is closed`);
    writeLines(this.fd, lines);
    // Named for the watchdog's thread: a disk that never completes the sync holds the event loop here.
    if (opts.durable !== false) activity.syscall(`fdatasync of ${this.path}`, () => fdatasyncSync(this.fd));
    this.count += lines.length;
  }

  /** Replaces the file with exactly these lines (a new file, fsync, rename, directory fsync). */
  rewrite(lines: readonly L[]): void {
    if (this.fd < 0) throw new Error(`journal ${this.path} is closed`);
    activity.syscall(`rewrite of ${this.path}`, () => replaceFile(this.path, (fd) => writeLines(fd, lines)));
    closeSync(this.fd);
    this.fd = openSync(this.path, 'a', 0o600);
    this.count = lines.length;
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }
}
