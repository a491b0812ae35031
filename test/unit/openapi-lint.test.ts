// schema/openapi.yaml passes Redocly's recommended lint (`npm run lint:openapi`, settings in redocly.yaml): no
// error, and no example that breaks its own schema (an error there, as client authors copy the examples). The
// warnings left are pinned below with the reason each is right, so a new one fails here until it is fixed or
// argued for. Runs the locally installed CLI (a devDependency) with its telemetry and update check off: no
// network. test/integration/openapi.test.ts checks the document against the routes; this checks it as a document.
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/source-tree.ts';

const CLI = join(ROOT, 'node_modules/@redocly/cli/bin/cli.js');
const CONFIG = join(ROOT, 'redocly.yaml');

interface Problem {
  ruleId: string;
  severity: 'error' | 'warn';
  message: string;
  location: { pointer: string }[];
}

interface LintRun {
  code: number;
  totals: { errors: number; warnings: number };
  problems: Problem[];
  stderr: string;
}

/** `redocly lint --format json` of `file` with the repository's settings. */
function lint(file: string): Promise<LintRun> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [CLI, 'lint', '--config', CONFIG, '--format', 'json', file],
      { cwd: ROOT, env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' }, timeout: 120_000, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (err && typeof err.code !== 'number') return reject(err);
        try {
          const out = JSON.parse(stdout) as Omit<LintRun, 'code' | 'stderr'>;
          resolve({ code: typeof err?.code === 'number' ? err.code : 0, totals: out.totals, problems: out.problems, stderr });
        } catch {
          reject(new Error(`redocly printed no JSON report: ${stderr}${stdout}`));
        }
      },
    );
  });
}

const where = (p: Problem): string => `${p.ruleId} (${p.severity}) at ${p.location[0]?.pointer}: ${p.message}`;

/**
 * Warnings kept on purpose. operation-4xx-response wants every operation to document a 4XX answer; these four
 * have none to document: no authentication, no parameters or body, and not rate limited (the description of
 * each says so), so a 4XX here would describe an answer the gateway never gives.
 */
const KEPT_WARNINGS = [
  'operation-4xx-response at #/paths/~1api~1dedicated~1pricing/get/responses',
  'operation-4xx-response at #/paths/~1api~1openapi.json/get/responses',
  'operation-4xx-response at #/paths/~1healthz/get/responses',
  'operation-4xx-response at #/paths/~1readyz/get/responses',
];

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('schema/openapi.yaml under Redocly lint', () => {
  it('has no error and no invalid example; the only warnings are the ones kept on purpose', async () => {
    const run = await lint('schema/openapi.yaml');
    const errors = run.problems.filter((p) => p.severity === 'error');
    expect(errors.map(where), run.stderr).toEqual([]);
    expect(run.code, run.stderr).toBe(0);
    const warnings = run.problems.filter((p) => p.severity === 'warn');
    expect(warnings.map((p) => `${p.ruleId} at ${p.location[0]?.pointer}`).sort(), warnings.map(where).join('\n')).toEqual(KEPT_WARNINGS);
  });

  it('an example that breaks its own schema fails the lint', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tg-openapi-lint-'));
    dirs.push(dir);
    const copy = join(dir, 'openapi.yaml');
    copyFileSync(join(ROOT, 'schema/openapi.yaml'), copy);
    // Every tunnel name's example with digits its base-32 pattern does not allow, as the tunnel's once was.
    const text = readFileSync(copy, 'utf8');
    const broken = text.replace(/examples: \[tg-[a-z2-7]{10}\]/g, 'examples: [tg-k3x9a0b1c2]');
    expect(broken).not.toBe(text);
    writeFileSync(copy, broken);
    const run = await lint(copy);
    expect(run.code).not.toBe(0);
    const errors = run.problems.filter((p) => p.severity === 'error').map((p) => `${p.ruleId} at ${p.location[0]?.pointer}`);
    // Reported where the lint first meets the schema (the tunnel, or a schema built on it such as EventTunnel).
    expect(errors.length).toBeGreaterThan(0);
    for (const e of errors) expect(e).toMatch(/^no-invalid-schema-examples at #\/components\/schemas\/\w+\/properties\/tunnel_name\/examples\/0$/);
  });
});
