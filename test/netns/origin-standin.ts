// The far end of a tunnel and the services behind it, for namespace tests on this GRE-less kernel: the
// dataplane's veth stand-in's peer is moved into an origin namespace and becomes its tunnel link
// (demo/standin-origin.ts, which the demo's origin uses too), and small node programs serve and hold TCP
// connections there. Shared by test/netns/edge-protection.test.ts and test/integration/tunnel-policy-edge.test.ts.
import { spawn, type ChildProcess } from 'node:child_process';
import { until } from '../helpers/wait.ts';
import type { TestNetns } from './netns.ts';

export { attachStandinOrigin } from '../../demo/standin-origin.ts';

// An origin's TCP service: every line gets "peer=<client address> echo=<line>" back, on ports 8080 and 9090.
export const SERVER = `
const net = require('node:net');
let n = 0;
for (const port of [8080, 9090]) {
  net.createServer((s) => { let b = ''; s.on('data', (d) => { b += d; let i; while ((i = b.indexOf('\\n')) >= 0) { s.write('peer=' + s.remoteAddress + ' echo=' + b.slice(0, i) + '\\n'); b = b.slice(i + 1); } }); s.on('error', () => {}); })
    .listen(port, '0.0.0.0', () => { if (++n === 2) console.log('ready'); });
}`;
// A client holding one connection: stdin lines go out, answers come back on stdout; 'open'/'closed' say its state.
export const KEEP = `
const net = require('node:net');
const [host, port] = process.argv.slice(1);
const s = net.connect({ host, port: Number(port) }, () => console.log('open'));
s.on('data', (d) => process.stdout.write(d));
s.on('error', (e) => console.log('closed ' + e.code));
s.on('close', () => { console.log('closed'); process.exit(0); });
process.stdin.on('data', (d) => s.write(d));`;

/** A long-lived process in a namespace whose stdout lines the test waits on. */
export class Proc {
  readonly lines: string[] = [];
  readonly child: ChildProcess;
  constructor(ns: TestNetns, script: string, args: string[] = []) {
    this.child = spawn('ip', ['netns', 'exec', ns.name, process.execPath, '-e', script, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
    let buf = '';
    this.child.stdout!.on('data', (d: Buffer) => {
      buf += String(d);
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        this.lines.push(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    });
  }
  saw(pred: (l: string) => boolean): Promise<string> {
    return until('a line from a namespace process', () => this.lines.find(pred), 30_000);
  }
  send(line: string): void {
    this.child.stdin!.write(`${line}\n`);
  }
  stop(): void {
    if (this.child.exitCode === null) this.child.kill('SIGTERM');
  }
}
