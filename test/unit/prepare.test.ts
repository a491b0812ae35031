// npm install's `prepare` (loader/prepare.mjs): builds the panel when its build tools (the panel's
// devDependencies) are installed, and keeps the built panel without a word when they are not
// (`npm ci --omit=dev`). Checked on throwaway checkouts made here: the decision for each layout, then the
// real script run by Node with a stand-in `build:panel` (a one-line Node script writing index.html, named
// as such: the real build is the panel's own and runs in its workspace), through the real npm.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
// @ts-expect-error plain JavaScript without declarations: its shape is checked by the assertions below.
import { plan } from '../../loader/prepare.mjs';

type Plan = { agent: boolean; panel: 'build' | 'kept' | 'missing' | 'none'; missingTools: string[] };
const planOf = plan as (root: string) => Plan;

const roots: string[] = [];
afterEach(() => {
  for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
});

function write(root: string, rel: string, text: string): void {
  mkdirSync(dirname(join(root, rel)), { recursive: true });
  writeFileSync(join(root, rel), text);
}

/** A checkout: root package.json (with or without build:panel), panel/package.json with `tools` as devDependencies, `installed` in `where`. */
function checkout(o: { buildScript?: string | null; tools?: string[]; installed?: Array<[string, string]>; built?: boolean; panel?: boolean; agent?: boolean }): string {
  const root = mkdtempSync(join(tmpdir(), 'prepare-'));
  roots.push(root);
  const scripts: Record<string, string> = {};
  if (o.buildScript !== null) scripts['build:panel'] = o.buildScript ?? 'node panel/build.mjs';
  write(root, 'package.json', JSON.stringify({ name: 'fixture', private: true, scripts }));
  if (o.panel !== false) {
    write(root, 'panel/package.json', JSON.stringify({ name: 'panel', private: true, devDependencies: Object.fromEntries((o.tools ?? []).map((t) => [t, '1.0.0'])) }));
  }
  for (const [where, name] of o.installed ?? []) write(root, join(where, 'node_modules', name, 'package.json'), JSON.stringify({ name, version: '1.0.0' }));
  if (o.built) write(root, 'panel/dist/index.html', '<!DOCTYPE html><title>built before</title>');
  if (o.agent) write(root, 'agent/bin/bundle.mjs', '');
  return root;
}

describe('the plan for a checkout', () => {
  it('builds when every build tool is installed, hoisted to the root or in the panel', () => {
    expect(planOf(checkout({ tools: ['preact', '@preact/signals'], installed: [['', 'preact'], ['', '@preact/signals']] })).panel).toBe('build');
    expect(planOf(checkout({ tools: ['preact', '@preact/signals'], installed: [['panel', 'preact'], ['', '@preact/signals']], built: true })).panel).toBe('build');
  });

  it('keeps a built panel when a tool is missing (npm ci --omit=dev), and names the missing ones when nothing is built', () => {
    const omitDev = { tools: ['preact', '@preact/signals'], installed: [['', 'preact']] as Array<[string, string]> };
    expect(planOf(checkout({ ...omitDev, built: true }))).toEqual({ agent: false, panel: 'kept', missingTools: ['@preact/signals'] });
    expect(planOf(checkout(omitDev))).toEqual({ agent: false, panel: 'missing', missingTools: ['@preact/signals'] });
  });

  it('does nothing for the panel in a checkout without one or without the build:panel script', () => {
    expect(planOf(checkout({ panel: false, agent: true }))).toEqual({ agent: true, panel: 'none', missingTools: [] });
    expect(planOf(checkout({ buildScript: null, tools: ['preact'], installed: [['', 'preact']] })).panel).toBe('none');
  });

  it('a panel that declares no build tools is built only when no build is there', () => {
    expect(planOf(checkout({ tools: [] })).panel).toBe('build');
    expect(planOf(checkout({ tools: [], built: true })).panel).toBe('kept');
  });
});

describe('the script, run as npm runs it', () => {
  const script = join(import.meta.dirname, '../../loader/prepare.mjs');
  function runPrepare(root: string) {
    mkdirSync(join(root, 'loader'), { recursive: true });
    copyFileSync(script, join(root, 'loader/prepare.mjs'));
    // Stand-in for the panel's real build: writes the entry point the gateway serves.
    write(root, 'panel/build.mjs', "import { mkdirSync, writeFileSync } from 'node:fs';\nmkdirSync('panel/dist', { recursive: true });\nwriteFileSync('panel/dist/index.html', 'fresh build');\n");
    return spawnSync(process.execPath, ['loader/prepare.mjs'], { cwd: root, encoding: 'utf8' });
  }

  it('with the tools installed it runs npm run build:panel', () => {
    const root = checkout({ tools: ['preact'], installed: [['', 'preact']], built: true });
    const r = runPrepare(root);
    expect(r.status, r.stderr).toBe(0);
    expect(readFileSync(join(root, 'panel/dist/index.html'), 'utf8')).toBe('fresh build');
  });

  it('without them it keeps the built panel and prints nothing', () => {
    const root = checkout({ tools: ['preact'], built: true });
    const r = runPrepare(root);
    expect(r.status).toBe(0);
    expect(r.stdout + r.stderr).toBe('');
    expect(readFileSync(join(root, 'panel/dist/index.html'), 'utf8')).toContain('built before');
  });

  it('without them and without a build it says so in one line and still succeeds (the install goes on)', () => {
    const root = checkout({ tools: ['preact'] });
    const r = runPrepare(root);
    expect(r.status).toBe(0);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/panel is not built.*\(preact\).*npm run build:panel/);
    expect(existsSync(join(root, 'panel/dist'))).toBe(false);
  });

  it('a failing build fails the install', () => {
    const root = checkout({ tools: ['preact'], installed: [['', 'preact']], buildScript: 'node -e "process.exit(3)"' });
    const r = runPrepare(root);
    expect(r.status).toBe(3);
    expect(r.stderr).toMatch(/prepare: npm run build:panel failed/);
  });
});

describe('the image (Dockerfile)', () => {
  const ROOT = join(import.meta.dirname, '../..');
  const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
  /** The stages: name (or index) and their instruction lines. */
  const stages = dockerfile
    .split(/^(?=FROM\s)/m)
    .filter((s) => s.startsWith('FROM'))
    .map((s) => ({ name: /^FROM\s+\S+(?:\s+AS\s+(\S+))?/i.exec(s)![1], lines: s.split('\n').filter((l) => l && !l.startsWith('#')) }));

  it('builds the panel in a build stage and copies only panel/dist into the runtime image, which installs without dev tools', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    const runtime = stages.at(-1)!;
    const builder = stages.find((s) => s.lines.some((l) => /^RUN .*npm run build:panel\b/.test(l)));
    expect(builder?.name).toBeTruthy();
    expect(builder).not.toBe(runtime);
    expect(runtime.lines).toContain(`COPY --from=${builder!.name} /app/panel/dist ./panel/dist`);
    const installs = runtime.lines.filter((l) => /^RUN .*npm (ci|install)\b/.test(l));
    expect(installs.length).toBe(1);
    expect(installs[0]).toMatch(/--omit=dev/);
    // Nothing from the panel's sources reaches the runtime image but its package.json (npm ci needs it).
    const panelCopies = runtime.lines.filter((l) => /^COPY\s.*\bpanel\b/.test(l));
    expect(panelCopies).toEqual(['COPY panel/package.json ./panel/', `COPY --from=${builder!.name} /app/panel/dist ./panel/dist`]);
    // A host's own build never enters the context.
    expect(readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n')).toContain('panel/dist');
  });

  it('npm install runs the prepare script (when it is there: an image installs before copying it)', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    expect(pkg.scripts.prepare).toBe('[ ! -f loader/prepare.mjs ] || node loader/prepare.mjs');
    expect(pkg.scripts['build:panel']).toBeTruthy();
  });
});
