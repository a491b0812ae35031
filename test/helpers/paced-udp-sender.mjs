// A UDP sender at a steady rate, for tests that compare what the edge measured with what was sent (run in a client
// namespace: `node paced-udp-sender.mjs HOST PORT PPS SECONDS`). Packet i is due at start + i/PPS; a sender that
// falls behind (a loaded host) sends what is due at once, but never more than 100 ms of packets (MAX_CATCH_UP):
// the rest are left out, so it never bursts above its rate for long. It prints, as JSON, the number sent and each packet's send time (ms since its
// start): the test derives the rate actually sent from those, not from the rate asked for.
import dgram from 'node:dgram';

// 100 ms of packets: a burst that short changes no one-second rate, which is what the edge measures.
const [host, port, pps, seconds] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4]), Number(process.argv[5])];
if (!host || !(port > 0) || !(pps > 0 && pps <= 20_000) || !(seconds > 0 && seconds <= 30)) {
  process.stderr.write('usage: paced-udp-sender.mjs HOST PORT PPS SECONDS (pps <= 20000, seconds <= 30)\n');
  process.exit(2);
}
const total = Math.round(pps * seconds);
const MAX_CATCH_UP = Math.max(1, Math.round(pps / 10));
const sock = dgram.createSocket('udp4');
const payload = Buffer.alloc(32, 0x61);
const times = [];
const t0 = performance.now();
let sent = 0;
let behind = 0;
await new Promise((resolve, reject) => {
  sock.on('error', reject);
  const tick = () => {
    const now = performance.now() - t0;
    let due = Math.min(total, Math.floor((now * pps) / 1000) + 1) - sent - behind;
    // Late by more than MAX_CATCH_UP packets: the rest are dropped from the schedule (never sent in a burst).
    if (due > MAX_CATCH_UP) {
      behind += due - MAX_CATCH_UP;
      due = MAX_CATCH_UP;
    }
    for (let i = 0; i < due; i++) {
      sock.send(payload, port, host);
      times.push(Math.round((performance.now() - t0) * 1000) / 1000);
      sent++;
    }
    if (sent + behind >= total) return resolve();
    setTimeout(tick, Math.max(0, ((sent + behind) * 1000) / pps - (performance.now() - t0)));
  };
  tick();
});
await new Promise((r) => setTimeout(r, 50));
sock.close();
process.stdout.write(JSON.stringify({ sent, skipped: behind, times }) + '\n');
