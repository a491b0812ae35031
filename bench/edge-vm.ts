// bench:edge inside the QEMU guest (test/vm/vm.ts: Debian's 6.1 kernel under software emulation), for the labs
// this host's kernel cannot run: its flowtables (nf_flow_table) are modules there and absent here. Every lab runs
// in the same guest, so its ratios are comparable with each other (not with a run on the host: the guest is
// emulated, 10-25x slower). The TG_BENCH_* variables are handed to bench/edge.ts in the guest.
//
//   npm run bench:edge-vm          (root; TG_BENCH_N=1000 TG_BENCH_PACKETS=200000 for a quicker run)
import { runInVm, vmUnavailable } from '../test/vm/vm.ts';

const unavailable = vmUnavailable();
if (unavailable) {
  console.log(`bench:edge-vm skipped: ${unavailable}`);
  process.exit(0);
}
const env = Object.fromEntries(Object.entries(process.env).filter((e): e is [string, string] => e[0].startsWith('TG_BENCH_') && e[1] !== undefined));
process.exit(await runInVm(['node_modules/.bin/node', '--enable-source-maps', '--import', './loader/register.mjs', 'bench/edge.ts'], env, { memMb: Number(process.env.TG_BENCH_VM_MEM ?? 3072) }));
