// The soak's report (docs/SOAK.md "Report"): faults injected, invariant checks passed and failed, the longest
// time to recover per fault kind, the load's answers and the findings; printed and written as JSON.
import type { CheckResult } from './invariants.ts';
import type { Load } from './load.ts';

/** How one wait for the invariants ended. */
export interface WaitOutcome {
  held: boolean;
  ms: number;
  /** The last round of checks. */
  checks: CheckResult[];
  /** The last error reading them (the database away), empty if none. */
  error: string;
}

export interface FaultRecord {
  kind: string;
  target: string;
  /** Seconds into the load when it was injected. */
  at_s: number;
  hold_s: number;
  /** How long the recover action itself took (a gateway's restart until it listens). */
  recover_action_s: number;
  /** From the recover action until every invariant held; null if they did not within the bound. */
  recovery_s: number | null;
  wait: WaitOutcome;
}

export interface SoakReport {
  ok: boolean;
  seed: number;
  minutes: number;
  reconcile_seconds: number;
  edges: string[];
  gateways: { label: string; starts: number }[];
  faults: {
    kind: string;
    target: string;
    at_s: number;
    hold_s: number;
    recover_action_s: number;
    recovery_s: number | null;
    failing: { name: string; found: string[] }[];
  }[];
  per_kind: Record<string, { injected: number; longest_recovery_s: number | null; not_recovered: number }>;
  checks: { passed: number; failed: number; by_name: Record<string, { passed: number; failed: number }> };
  /** Safety checks that failed at any read, fault or not (each once, with what it found first). */
  safety_violations: { name: string; found: string[] }[];
  final: { held: boolean; checks: { name: string; ok: boolean; looked: number; found: string[] }[] };
  load: {
    answers: Record<string, Record<string, number>>;
    tunnels_bought: number;
    ips_reused: number;
    server_errors_500: number;
    server_error_samples: string[];
    violations: string[];
  };
  webhooks: { deliveries_received: number; bad: string[] };
  gateway_crashes: string[];
  /** Faults the soak could not inject or undo (its own trouble; fails the run all the same). */
  fault_errors: string[];
}

const round = (s: number) => Math.round(s * 10) / 10;

export function buildReport(i: {
  seed: number;
  minutes: number;
  reconcileSeconds: number;
  edges: string[];
  gateways: { label: string; starts: number }[];
  faults: FaultRecord[];
  final: WaitOutcome;
  safetySeen: CheckResult[];
  load: Load;
  webhooks: { received: number; bad: string[] };
  crashes: string[];
  faultErrors: string[];
}): SoakReport {
  const byName: Record<string, { passed: number; failed: number }> = {};
  const tally = (checks: CheckResult[]) => {
    for (const c of checks) {
      const t = (byName[c.name] ??= { passed: 0, failed: 0 });
      if (c.ok) t.passed++;
      else t.failed++;
    }
  };
  for (const f of i.faults) tally(f.wait.checks);
  tally(i.final.checks);
  const perKind: SoakReport['per_kind'] = {};
  for (const f of i.faults) {
    const k = (perKind[f.kind] ??= { injected: 0, longest_recovery_s: null, not_recovered: 0 });
    k.injected++;
    if (f.recovery_s === null) k.not_recovered++;
    else k.longest_recovery_s = round(Math.max(k.longest_recovery_s ?? 0, f.recovery_s));
  }
  const passed = Object.values(byName).reduce((n, t) => n + t.passed, 0);
  const failed = Object.values(byName).reduce((n, t) => n + t.failed, 0);
  const report: SoakReport = {
    ok: false,
    seed: i.seed,
    minutes: i.minutes,
    reconcile_seconds: i.reconcileSeconds,
    edges: i.edges,
    gateways: i.gateways,
    faults: i.faults.map((f) => ({
      kind: f.kind,
      target: f.target,
      at_s: round(f.at_s),
      hold_s: f.hold_s,
      recover_action_s: round(f.recover_action_s),
      recovery_s: f.recovery_s === null ? null : round(f.recovery_s),
      failing: f.wait.checks.filter((c) => !c.ok).map((c) => ({ name: c.name, found: c.found.slice(0, 5) })),
    })),
    per_kind: perKind,
    checks: { passed, failed, by_name: byName },
    safety_violations: i.safetySeen.map((c) => ({ name: c.name, found: c.found })),
    final: { held: i.final.held, checks: i.final.checks.map((c) => ({ name: c.name, ok: c.ok, looked: c.looked, found: c.found.slice(0, 5) })) },
    load: {
      answers: i.load.answers,
      tunnels_bought: i.load.bought.size,
      ips_reused: i.load.ipsReused,
      server_errors_500: i.load.serverErrors(),
      server_error_samples: i.load.serverErrorSamples,
      violations: i.load.violations.slice(0, 50),
    },
    webhooks: { deliveries_received: i.webhooks.received, bad: i.webhooks.bad.slice(0, 50) },
    gateway_crashes: i.crashes,
    fault_errors: i.faultErrors,
  };
  report.ok =
    failed === 0 &&
    i.final.held &&
    report.safety_violations.length === 0 &&
    report.load.violations.length === 0 &&
    report.load.server_errors_500 === 0 &&
    report.webhooks.bad.length === 0 &&
    report.gateway_crashes.length === 0 &&
    report.fault_errors.length === 0;
  return report;
}

export function printReport(r: SoakReport): void {
  const lines: string[] = [];
  lines.push('', `soak report: ${r.ok ? 'PASS' : 'FAIL'}  (seed ${r.seed}, ${r.minutes} min, reconcile every ${r.reconcile_seconds} s)`);
  lines.push(`faults injected: ${r.faults.length}`);
  lines.push('  kind                     injected  longest recovery  not recovered');
  for (const [kind, k] of Object.entries(r.per_kind)) {
    lines.push(`  ${kind.padEnd(24)} ${String(k.injected).padStart(8)}  ${(k.longest_recovery_s === null ? '-' : `${k.longest_recovery_s.toFixed(1)} s`).padStart(16)}  ${String(k.not_recovered).padStart(13)}`);
  }
  lines.push(`invariant checks: ${r.checks.passed} passed, ${r.checks.failed} failed`);
  for (const [name, t] of Object.entries(r.checks.by_name)) lines.push(`  ${name.padEnd(56)} ${t.passed} passed, ${t.failed} failed`);
  for (const v of r.safety_violations) lines.push(`SAFETY VIOLATION ${v.name}: ${v.found.join('; ')}`);
  const bought = r.load.answers.purchase ?? {};
  lines.push(
    `load: ${r.load.tunnels_bought} tunnels bought (purchase answers ${JSON.stringify(bought)}), ${r.load.ips_reused} freed IPs sold again, ${r.load.server_errors_500} answers 500`,
  );
  for (const [action, by] of Object.entries(r.load.answers)) lines.push(`  ${action.padEnd(16)} ${JSON.stringify(by)}`);
  for (const v of r.load.violations) lines.push(`LOAD VIOLATION ${v}`);
  for (const v of r.load.server_error_samples) lines.push(`ANSWER 500 ${v}`);
  lines.push(`webhooks: ${r.webhooks.deliveries_received} deliveries received, ${r.webhooks.bad.length} failed verification`);
  for (const c of r.gateway_crashes) lines.push(`GATEWAY CRASH ${c}`);
  for (const c of r.fault_errors) lines.push(`FAULT ERROR ${c}`);
  if (!r.final.held) for (const c of r.final.checks.filter((x) => !x.ok)) lines.push(`FINAL ${c.name}: ${c.found.join('; ')}`);
  console.log(lines.join('\n'));
}
