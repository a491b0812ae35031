// Scratch (not committed): does the link leave the kernel's list well before an off-thread delete returns?
import { execFileSync } from 'node:child_process';
import { Rtnl } from '../agent/netlink/client.ts';
const ns = 'tgx-del3';
execFileSync('ip', ['netns', 'add', ns]);
try {
  const r = Rtnl.open({ netns: `/run/netns/${ns}` });
  const reaper = Rtnl.open({ netns: `/run/netns/${ns}`, sendOffThread: true });
  const gone: number[] = [], acked: number[] = [], polls: number[] = [], sync: number[] = [];
  for (let i = 0; i < 24; i++) { await r.createVeth(`a${i}`, `b${i}`); await r.setLinkUp(`a${i}`); }
  let ticks = 0; const tick = setInterval(() => ticks++, 1);
  for (let i = 0; i < 24; i += 2) {
    const t = performance.now();
    let ack = 0;
    const done = reaper.deleteLink(`a${i}`).then(() => { ack = performance.now() - t; });
    let n = 0;
    while ((await r.findLink(`a${i}`)) !== undefined) { n++; await new Promise((res) => setTimeout(res, 0)); }
    gone.push(performance.now() - t); polls.push(n);
    await done; acked.push(ack);
    const t2 = performance.now(); await r.deleteLink(`a${i + 1}`); sync.push(performance.now() - t2);
  }
  clearInterval(tick);
  const med = (a: number[]) => [...a].sort((x, y) => x - y)[a.length >> 1]!.toFixed(2);
  console.log(`off-thread: unlisted p50 ${med(gone)} ms (polls p50 ${med(polls)}), acked p50 ${med(acked)} ms; main-thread delete p50 ${med(sync)} ms; timer ticks ${ticks}`);
  r.close(); reaper.close();
} finally {
  execFileSync('ip', ['netns', 'del', ns]);
}
