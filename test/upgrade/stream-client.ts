// A TCP client that keeps one connection busy for the upgrade test, run in a client namespace with
// test/netns/origin-standin.ts `Proc`: it connects once (never again), sends a numbered line every 10 ms,
// and checks that every answer is the origin's echo of the next line in order ("peer=<client> echo=<n>",
// the origin stand-in's SERVER), so a lost, reordered or foreign byte is seen. It never reconnects: a
// connection that ends prints `{"closed": ...}` and the process exits, so "the same socket all along" is
// one `open` line and no `closed`.
//
// stdin commands: `status` prints {"status": {...}}; `stop` stops sending and, once every line sent has come
// back, prints {"done": {...}}. Figures: lines sent and echoed, bytes sent, the local port, the longest time
// between two answers (ms), the first wrong answer.
export const STREAM_CLIENT = `
const net = require('node:net');
const [host, port, peer] = process.argv.slice(1);
let sent = 0, echoed = 0, bytes = 0, bad = null, timer = null, stopping = false;
let last = 0, maxGap = 0;
const figures = () => ({ sent, echoed, bytes, local_port: s.localPort, max_gap_ms: Math.round(maxGap), bad });
const finish = () => { if (stopping && echoed === sent) { console.log(JSON.stringify({ done: figures() })); s.end(); } };
const s = net.connect({ host, port: Number(port) }, () => {
  console.log(JSON.stringify({ open: { local_port: s.localPort } }));
  last = performance.now();
  timer = setInterval(() => { const line = String(++sent) + '\\n'; bytes += line.length; s.write(line); }, 10);
});
let buf = '';
s.on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\\n')) >= 0) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    const want = 'peer=' + peer + ' echo=' + (echoed + 1);
    if (line !== want && bad === null) bad = { got: line, want };
    echoed++;
    const now = performance.now();
    maxGap = Math.max(maxGap, now - last);
    last = now;
  }
  finish();
});
s.on('error', (e) => console.log(JSON.stringify({ closed: e.code })));
s.on('close', () => { if (!stopping) console.log(JSON.stringify({ closed: 'close' })); clearInterval(timer); process.exit(0); });
require('node:readline').createInterface({ input: process.stdin }).on('line', (cmd) => {
  if (cmd === 'status') console.log(JSON.stringify({ status: figures() }));
  if (cmd === 'stop') { stopping = true; clearInterval(timer); finish(); }
});`;

/** One figures line of STREAM_CLIENT. */
export interface StreamFigures {
  sent: number;
  echoed: number;
  bytes: number;
  local_port: number;
  max_gap_ms: number;
  bad: { got: string; want: string } | null;
}
