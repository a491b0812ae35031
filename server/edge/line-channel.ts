// One long-lived exec channel on a node's warm SSH connection that answers lines, not one result line: the
// `events` op's transport (docs/CONTRACTS.md "Events stream"). Writes the signed job on stdin and closes it, hands
// each complete line to `onLine` as it arrives, and ends the channel when the agent closes it, when the caller
// does, when the connection drops, or when nothing (not even a keep-alive) came for `silenceMs`: a stream that
// died without a FIN is noticed by that, not by the SSH keepalive a minute later. What the lines mean is the
// caller's (common/edge-events.ts decodes them); this module only moves bytes.
import type ssh2 from 'ssh2';
import { LineSplitter, MAX_EVENT_LINE } from '../../common/edge-events.ts';
import { EdgeSshError } from './result-line.ts';

export interface LineChannel {
  /** Resolves (never rejects) when the channel is over, with why, in words for the log. */
  readonly closed: Promise<string>;
  /** Ends the channel (the agent sees it close and stops writing). */
  close(why: string): void;
}

export interface LineChannelOptions {
  /** The channel is closed when no byte came for this long. */
  silenceMs: number;
  /** Each complete line, newline removed. */
  onLine: (line: string) => void;
}

/** Opens the channel; rejects (EdgeSshError connect_failed) when the exec is refused or the connection is gone. */
export function openLineChannel(client: ssh2.Client, command: string, stdin: string, o: LineChannelOptions): Promise<LineChannel> {
  return new Promise((resolve, reject) => {
    let done!: (why: string) => void;
    const closed = new Promise<string>((r) => (done = r));
    client.exec(command, (err, stream) => {
      if (err) {
        reject(new EdgeSshError('connect_failed', `exec refused: ${err.message}`));
        return;
      }
      let why: string | undefined;
      let exitCode: number | undefined;
      let timer: NodeJS.Timeout | undefined;
      const end = (reason: string) => {
        why ??= reason;
        stream.close();
      };
      const arm = () => {
        clearTimeout(timer);
        timer = setTimeout(() => end(`nothing from the agent within ${o.silenceMs} ms`), o.silenceMs);
        timer.unref();
      };
      const lines = new LineSplitter();
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => {
        arm();
        const got = lines.push(chunk);
        for (const l of got.lines) o.onLine(l);
        if (got.overflow) end(`a line longer than ${MAX_EVENT_LINE} bytes`);
      });
      stream.stderr.on('data', () => undefined);
      stream.on('error', () => undefined);
      stream.on('exit', (code: number | null) => {
        if (typeof code === 'number') exitCode = code;
      });
      stream.on('close', () => {
        clearTimeout(timer);
        done(why ?? `the agent closed the stream${exitCode === undefined ? '' : ` (exit status ${exitCode})`}`);
      });
      arm();
      stream.end(stdin);
      resolve({ closed, close: end });
    });
  });
}
