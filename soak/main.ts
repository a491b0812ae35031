// `npm run soak` (docs/SOAK.md): two gateway replicas and a few real agents under a continuous load, one
// fault a minute from faults.ts, and the invariants of invariants.ts checked after each fault and at the
// end. TG_SOAK_MINUTES (default 10), TG_SOAK_SEED (default: random, printed), TG_SOAK_REPORT (the JSON
// report's path; default bench/results/soak.json). Exits 1 when a check failed or a finding was made.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { faultOrder, type FaultContext, type Injected } from './faults.ts';
import { livenessChecks, safetyChecks, type CheckResult, type InvariantInputs } from './invariants.ts';
import { Load, sleep } from './load.ts';
import { seededRng } from './random.ts';
import { buildReport, printReport, type FaultRecord, type WaitOutcome } from './report.ts';
import { SoakRig } from './rig.ts';

const ROOT = resolve(import.meta.dirname, '..');

function envNumber(name: string, fallback: number, min: number, max: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min || n > max) throw new Error(`${name} must be a number from ${min} to ${max}, not ${raw}`);
  return n;
}

const minutes = envNumber('TG_SOAK_MINUTES', 10, 1, 24 * 60);
const seed = envNumber('TG_SOAK_SEED', Math.floor(Math.random() * 2 ** 31), 0, 2 ** 32 - 1);
const reportPath = resolve(process.env.TG_SOAK_REPORT || join(ROOT, 'bench/results/soak.json'));
const reconcileSeconds = envNumber('TG_SOAK_RECONCILE_SECONDS', 10, 1, 3600);
const realEdges = envNumber('TG_SOAK_EDGES', 3, 1, 8);
/**
 * How long the invariants may take to hold again after a fault's recovery: a bound that turns a system that
 * never recovers into a failure, far above a loaded host's times (an agent restarted by hand is reconciled
 * at its reconnect; a killed gateway's job expires after EDGE_JOB_EXPIRE_SECONDS, 30 s, and its retries
 * back off to a minute). The measured times are the report's figures, not checked against anything else.
 */
const RECOVERY_BOUND_MS = 240_000;
/** The first fault comes after this much of the load, then one a minute. */
const FIRST_FAULT_MS = 30_000;
const FAULT_EVERY_MS = 60_000;

const started = Date.now();
const log = (msg: string) => console.log(`[soak +${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s] ${msg}`);

if (process.getuid?.() !== 0) {
  console.error('the soak needs root (network namespaces, nftables, its own PostgreSQL cluster)');
  process.exit(2);
}

const rig = new SoakRig({ gateways: 2, realEdges, accounts: 4, reconcileSeconds, log });
let closing: Promise<void> | null = null;
const close = () => (closing ??= rig.close());
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    log(`${sig}: tearing down`);
    void close().then(() => process.exit(130));
  });
}

/** Polls every check until all hold (liveness ones about what existed when the wait began) or the bound passes. */
async function waitForInvariants(inputs: InvariantInputs, safetySeen: Map<string, CheckResult>): Promise<WaitOutcome> {
  const t0 = performance.now();
  let cutoff: Date | null = null;
  let last: CheckResult[] = [];
  let lastError = '';
  let lastSaid = t0;
  for (;;) {
    try {
      cutoff ??= (await rig.raw.query<{ now: Date }>('select now() as now')).rows[0]!.now;
      const safety = await safetyChecks(rig.snapshot, inputs);
      for (const s of safety) if (!s.ok && !safetySeen.has(s.name)) safetySeen.set(s.name, s);
      last = [...safety, ...(await livenessChecks(rig.raw, inputs, cutoff))];
      lastError = '';
      if (last.every((c) => c.ok)) return { held: true, ms: performance.now() - t0, checks: last, error: '' };
    } catch (e) {
      // The database restarting under the checks: try again.
      lastError = (e as Error).message;
    }
    if (performance.now() - t0 > RECOVERY_BOUND_MS) return { held: false, ms: performance.now() - t0, checks: last, error: lastError };
    if (performance.now() - lastSaid > 20_000) {
      lastSaid = performance.now();
      const failing = last.filter((c) => !c.ok).map((c) => `${c.name} (${c.found.length}: ${c.found[0]})`);
      log(`  waiting: ${lastError || failing.join('; ')}`);
    }
    await sleep(1000);
  }
}

async function main(): Promise<void> {
  const rng = seededRng(seed);
  log(`seed ${seed} (TG_SOAK_SEED=${seed} replays the fault order and targets), ${minutes} min, ${realEdges} real edges, reconcile every ${reconcileSeconds} s`);
  await rig.open();
  const ctx: FaultContext = { gateways: rig.gateways, edges: rig.edges, postgres: rig.postgres, db: rig.raw, rng };
  // The load has a random source of its own, so the fault order depends on the seed alone.
  const load = new Load(rig.gateways, rig.accounts, seededRng(seed ^ 0x5eed), rig.topUp, rig.priceUsd);
  const inputs: InvariantInputs = { edges: rig.edges, answered: load.bought, received: rig.receiver.receivedBy };
  const safetySeen = new Map<string, CheckResult>();

  const t0 = Date.now();
  const durationMs = minutes * 60_000;
  const count = Math.max(1, Math.ceil((durationMs - FIRST_FAULT_MS) / FAULT_EVERY_MS));
  const plan = faultOrder(ctx, count);
  log(`load started; faults planned: ${plan.map((f) => f.name).join(', ')}`);
  load.start();
  const faults: FaultRecord[] = [];
  const injectErrors: string[] = [];
  const recoverErrors: string[] = [];
  for (let k = 0; k < plan.length; k++) {
    const due = t0 + FIRST_FAULT_MS + k * FAULT_EVERY_MS;
    if (due >= t0 + durationMs) break;
    await sleep(Math.max(0, due - Date.now()));
    const fault = plan[k]!;
    const at = (Date.now() - t0) / 1000;
    let injected: Injected;
    try {
      injected = await fault.inject(ctx);
    } catch (e) {
      // A fault that could not be injected is the soak's own trouble, not the product's: said, and skipped.
      log(`fault ${k + 1}/${plan.length} ${fault.name}: could not be injected: ${(e as Error).message}`);
      injectErrors.push(`${fault.name}: ${(e as Error).message}`);
      continue;
    }
    log(`fault ${k + 1}/${plan.length} ${fault.name}: ${injected.target}`);
    await sleep(fault.holdMs);
    const r0 = performance.now();
    // The recover action (a restart) is tried again while it fails: a gateway slow to start on a loaded host.
    for (let attempt = 1; ; attempt++) {
      try {
        await fault.recover(ctx, injected);
        break;
      } catch (e) {
        log(`  recover action failed (attempt ${attempt}): ${(e as Error).message.slice(0, 300)}`);
        if (attempt === 3) {
          recoverErrors.push(`${fault.name}: ${(e as Error).message.slice(0, 300)}`);
          break;
        }
      }
    }
    const recoverMs = performance.now() - r0;
    const wait = await waitForInvariants(inputs, safetySeen);
    // Time to recover: from the recover action until every invariant holds.
    const recoveryMs = recoverMs + wait.ms;
    faults.push({ kind: fault.name, target: injected.target, at_s: at, hold_s: fault.holdMs / 1000, recover_action_s: recoverMs / 1000, recovery_s: wait.held ? recoveryMs / 1000 : null, wait });
    log(`  ${wait.held ? `all invariants hold ${(recoveryMs / 1000).toFixed(1)} s after the recover action` : `invariants still failing after ${(RECOVERY_BOUND_MS / 1000).toFixed(0)} s: ${wait.checks.filter((c) => !c.ok).map((c) => `${c.name}: ${c.found[0]}`).join('; ')}${wait.error}`}`);
  }
  await sleep(Math.max(0, t0 + durationMs - Date.now()));
  log('load stopping');
  await load.stop();
  const final = await waitForInvariants(inputs, safetySeen);
  log(`final check: ${final.held ? 'all invariants hold' : 'invariants failing'}`);
  rig.receiver.drain();

  const report = buildReport({
    seed,
    minutes,
    reconcileSeconds,
    edges: rig.edges.map((e) => e.label),
    gateways: rig.gateways.map((g) => ({ label: g.label, starts: g.starts })),
    faults,
    final,
    safetySeen: [...safetySeen.values()],
    load,
    webhooks: { received: rig.receiver.deliveries, bad: rig.receiver.bad },
    crashes: rig.gateways.flatMap((g) => g.crashes),
    faultErrors: [...injectErrors.map((e) => `inject ${e}`), ...recoverErrors.map((e) => `recover ${e}`)],
  });
  printReport(report);
  mkdirSync(dirname(reportPath), { recursive: true });
  writeFileSync(reportPath, `${JSON.stringify(report, null, 2)}\n`);
  log(`report written to ${reportPath}`);
  process.exitCode = report.ok ? 0 : 1;
}

try {
  await main();
} catch (e) {
  console.error(e);
  process.exitCode = 1;
} finally {
  await close();
}
