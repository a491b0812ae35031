// Durable files in the agent's state directory: the directory itself, and whole-file replacement that a
// crash can never leave torn (the host key; journal.ts's compaction).
import { closeSync, constants as fsConstants, fdatasyncSync, fsyncSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { randomBytes } from 'node:crypto';

/** Creates `dir` (0700, with its parents) when it is missing. */
export function ensureDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
}

/** Makes a rename or a file creation in `dir` durable. */
export function fsyncDir(dir: string): void {
  const fd = openSync(dir, fsConstants.O_RDONLY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Replaces `path` so that a crash leaves either the old file or the new one, never a torn one: a temporary
 * file in the same directory (created with `mode`) written by `write`, fdatasync, rename, fsync of the directory.
 */
export function replaceFile(path: string, write: (fd: number) => void, mode = 0o600): void {
  const dir = dirname(path);
  const tmp = join(dir, `.${randomBytes(6).toString('hex')}.tmp`);
  const fd = openSync(tmp, fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL, mode);
  try {
    write(fd);
    fdatasyncSync(fd);
    closeSync(fd);
    renameSync(tmp, path);
  } catch (e) {
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
    rmSync(tmp, { force: true });
    throw e;
  }
  fsyncDir(dir);
}

export function writeFileAtomic(path: string, data: string | Buffer, mode = 0o600): void {
  replaceFile(path, (fd) => void writeSync(fd, typeof data === 'string' ? Buffer.from(data) : data), mode);
}
