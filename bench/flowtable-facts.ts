// The kernel facts under the fast path's design (docs/FLOWTABLE.md), checked in the QEMU guest (Debian's 6.1
// kernel, which has flowtables; this host's has none): test/vm/guest/flowtable-facts.sh with a hand-written
// table of the chosen shape. Prints `FACT ok|FAIL` lines; exits non-zero when one failed.
//
//   node --import ./loader/register.mjs bench/flowtable-facts.ts      (root)
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInVm, vmUnavailable } from '../test/vm/vm.ts';
import { ROOT } from './lib/process.ts';

const unavailable = vmUnavailable();
if (unavailable) {
  console.log(`flowtable facts skipped: ${unavailable}`);
  process.exit(0);
}
// Built here (the guest shares this filesystem; a compiler under emulation is slow).
const dir = mkdtempSync(join(tmpdir(), 'tg-facts-'));
const flood = join(dir, 'udp-flood');
const cc = spawnSync('cc', ['-O2', '-o', flood, join(ROOT, 'bench/lib/udp-flood.c')], { encoding: 'utf8' });
if (cc.status !== 0) throw new Error(`cc: ${cc.stderr}`);
const code = await runInVm(['bash', 'test/vm/guest/flowtable-facts.sh'], { TG_FACTS_FLOOD: flood });
rmSync(dir, { recursive: true, force: true });
process.exit(code);
