// DATA_DIR holds the embedded database and the admin socket (server/cli/admin-socket.ts), which carries
// admin command lines, passwords included: it is made private to the gateway's user (0700) before either
// is created in it. docs/SECURITY.md row 22.
import fs from 'node:fs';

/** Creates `dir` (and its parents) with mode 0700, and narrows an existing one of ours to 0700. */
export function prepareDataDir(dir: string): void {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = fs.statSync(dir);
  // Someone else's directory is left as it is: changing it is not ours to do, and the admin socket's
  // owner check still refuses a socket planted there.
  if (st.uid === process.getuid?.() && (st.mode & 0o777) !== 0o700) fs.chmodSync(dir, 0o700);
}
