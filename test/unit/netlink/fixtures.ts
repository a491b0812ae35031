// Loads the strace captures in test/fixtures/netlink (see capture.sh there for the commands).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { normaliseSeq, parseMessages, type NlMsg } from '../../../agent/netlink/message.ts';

const dir = fileURLToPath(new URL('../../fixtures/netlink/', import.meta.url));

export interface Capture {
  command: string;
  /** One buffer per sendmsg/sendto (or recvmsg) call, in order. */
  calls: Buffer[];
  /** For `nft -f`: the file it loaded, as capture.sh copied it into the comment lines. */
  input: string;
}

export function loadCapture(name: string): Capture {
  const lines = readFileSync(`${dir}${name}.hex`, 'utf8').split('\n');
  const command = (lines[0] ?? '').replace(/^# command( \(kernel replies\))?: /, '');
  const calls = lines.filter((l) => l.length > 0 && !l.startsWith('#')).map((l) => Buffer.from(l.trim(), 'hex'));
  const input = lines.filter((l) => l.startsWith('#   ')).map((l) => `${l.slice(4)}\n`).join('');
  return { command, calls, input };
}

/** Every message of every call, each as its own buffer (header included). */
export function capturedMessages(name: string): Buffer[] {
  const out: Buffer[] = [];
  for (const call of loadCapture(name).calls) {
    for (const m of parseMessages(call)) out.push(Buffer.from(call.subarray(m.payload.byteOffset - call.byteOffset - 16, m.payload.byteOffset - call.byteOffset + m.payload.length)));
  }
  return out;
}

/** The last captured message of a type: iproute2 first resolves names with GETLINK, the request proper comes last. */
export function lastOfType(name: string, type: number): Buffer {
  const all = capturedMessages(name).filter((b) => b.readUInt16LE(4) === type);
  const last = all.at(-1);
  if (!last) throw new Error(`no message of type ${type} in ${name}`);
  return last;
}

/** Hex with seq and pid zeroed: the only fields that legitimately differ between `ip`/`nft` and us. */
export function norm(b: Buffer): string {
  return normaliseSeq(b).toString('hex');
}

export function decodeAll(buf: Buffer): NlMsg[] {
  return parseMessages(buf);
}
