// The soak with faults at CI length (docs/SOAK.md): `npm run soak` for TG_SOAK_MINUTES=3 in its own process
// (two gateway processes, real agents in namespaces it makes, its own PostgreSQL cluster), then its JSON
// report read back. The soak decides each invariant itself (soak/invariants.ts); this test fails on what
// the report says failed, naming it. Its only times are the soak's recovery bound (a fault the system does
// not recover from within it is a failure) and this file's bound against a hung run.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { SoakReport } from '../../soak/report.ts';
import { canRunPrivatePostgres } from '../helpers/private-postgres.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { isRoot } from '../netns/netns.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const NODE = join(ROOT, 'node_modules/.bin/node');
const MINUTES = 3;
/** Against a hung run only: setup, 3 minutes of load, and the recovery bound of the last fault and of the final check, with room. */
const RUN_BOUND_MS = 25 * 60_000;

const dir = mkdtempSync(join(tmpdir(), 'tg-soak-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(skipUnless(isRoot, 'root (network namespaces, nftables)') || skipUnless(canRunPrivatePostgres, 'a private PostgreSQL cluster (root, PostgreSQL server binaries, the postgres user)'))(
  `soak with faults, ${MINUTES} minutes`,
  () => {
    it('every fault recovered, every invariant held, no answer 500, no gateway crash', async () => {
      const reportPath = join(dir, 'soak.json');
      const child = spawn(NODE, ['--enable-source-maps', '--import', './loader/register.mjs', 'soak/main.ts'], {
        cwd: ROOT,
        env: { ...process.env, TG_SOAK_MINUTES: String(MINUTES), TG_SOAK_REPORT: reportPath },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += String(d)));
      child.stderr.on('data', (d: Buffer) => (out += String(d)));
      const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
      // The soak's own lines (its seed first) say what happened when anything below fails.
      const report = JSON.parse(readFileSync(reportPath, 'utf8')) as SoakReport;
      // The soak's printed report (faults, recovery times, checks, load), shown with the test's output.
      console.log(out.slice(out.indexOf('soak report:')));
      const context = `${out.slice(-6000)}`;
      expect(report.faults.length, context).toBeGreaterThanOrEqual(MINUTES - 1);
      expect(report.faults.filter((f) => f.recovery_s === null), context).toEqual([]);
      expect(report.safety_violations, context).toEqual([]);
      expect(report.checks.failed, context).toBe(0);
      expect(report.final.held, context).toBe(true);
      expect(report.load.violations, context).toEqual([]);
      expect(report.load.server_errors_500, context).toBe(0);
      expect(report.webhooks.bad, context).toEqual([]);
      expect(report.gateway_crashes, context).toEqual([]);
      expect(report.fault_errors, context).toEqual([]);
      // The load did what it is for: purchases bought tunnels, some were refused for lack of funds, webhooks came.
      expect(report.load.answers.purchase?.['201'] ?? 0, context).toBeGreaterThan(0);
      expect(report.load.answers.purchase?.['402'] ?? 0, context).toBeGreaterThan(0);
      expect(report.webhooks.deliveries_received, context).toBeGreaterThan(0);
      expect(report.ok, context).toBe(true);
      expect(code, context).toBe(0);
    }, RUN_BOUND_MS);
  },
);
