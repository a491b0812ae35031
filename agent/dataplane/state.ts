// The agent's record of what it created (docs/CONTRACTS.md "Dataplane": it owns only the links it created, recorded in its
// state). An append-only JSON-lines journal in stateDir, replayed at start and compacted into a snapshot
// when it has grown well past the live set, so one apply costs one small appended line and an fdatasync,
// not a rewrite of 10,000 records.
import { closeSync, fdatasyncSync, mkdirSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { OwnedTunnel } from './diff.ts';
import type { TunnelSpec } from './types.ts';

type Line = { v: 1; put: TunnelSpec; pending?: true } | { v: 1; del: string };

export const STATE_FILE = 'dataplane-state.jsonl';
/**
 * The last desired state the gateway gave this node (every applied, removed and reconciled tunnel spec),
 * in the same journal format: what a restart or a reboot restores at start (docs/CONTRACTS.md "Restart and reboot").
 * Kept apart from STATE_FILE, which records what the agent created (a tunnel whose removal failed is
 * still owned there, but no longer desired).
 */
export const DESIRED_FILE = 'desired-state.jsonl';

const putLine = (p: OwnedTunnel): Line => (p.pending ? { v: 1, put: p.spec, pending: true } : { v: 1, put: p.spec });

/** Lines per write(): 10,000 records as one string were ~5 MB of transient heap at the agent's peak. */
const WRITE_CHUNK = 512;

/** Appends the lines (fsync is the caller's); a crash between writes leaves a torn tail that replay skips. */
function writeLines(fd: number, lines: readonly Line[]): void {
  for (let i = 0; i < lines.length; i += WRITE_CHUNK) {
    let text = '';
    for (const l of lines.slice(i, i + WRITE_CHUNK)) text += `${JSON.stringify(l)}\n`;
    writeSync(fd, text);
  }
}

export class StateStore {
  readonly path: string;
  private readonly records = new Map<string, OwnedTunnel>();
  private fd: number;
  private lines = 0;

  private constructor(dir: string, file: string) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    this.path = join(dir, file);
    let text = '';
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    for (const raw of text.split('\n')) {
      if (raw.trim() === '') continue;
      let l: Line;
      try {
        l = JSON.parse(raw) as Line;
      } catch {
        continue; // a torn last line from a crash mid-write: the operation it described never completed
      }
      if ('put' in l) this.records.set(l.put.id, l.pending ? { spec: l.put, pending: true } : { spec: l.put });
      else if ('del' in l) this.records.delete(l.del);
      this.lines++;
    }
    this.fd = openSync(this.path, 'a', 0o600);
  }

  static open(dir: string, file: string = STATE_FILE): StateStore {
    return new StateStore(dir, file);
  }

  get tunnels(): ReadonlyMap<string, OwnedTunnel> {
    return this.records;
  }

  /** Records puts and deletes durably, in one write. */
  commit(puts: readonly OwnedTunnel[], dels: readonly string[]): void {
    if (puts.length === 0 && dels.length === 0) return;
    for (const p of puts) this.records.set(p.spec.id, p);
    for (const d of dels) this.records.delete(d);
    if (this.lines + puts.length + dels.length > 2 * this.records.size + 1000) {
      this.snapshot();
      return;
    }
    writeLines(this.fd, [...puts.map(putLine), ...dels.map((d) => ({ v: 1, del: d }) as Line)]);
    fdatasyncSync(this.fd);
    this.lines += puts.length + dels.length;
  }

  /** Replaces the journal with the live records (write, fsync, rename). */
  snapshot(): void {
    const tmp = `${this.path}.tmp`;
    const fd = openSync(tmp, 'w', 0o600);
    try {
      writeLines(fd, [...this.records.values()].map(putLine));
      fdatasyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, this.path);
    closeSync(this.fd);
    this.fd = openSync(this.path, 'a', 0o600);
    this.lines = this.records.size;
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }
}
