// The origin script as a file (server/domain/origin-script/): origin.sh is checked by bash and shellcheck
// as it sits in the repository, not only as rendered; what the gateway serves is the rendered header plus
// that file's body, byte for byte; the unit template's placeholders are exactly the ones filled in; and
// both files are found from the module's own directory, as `npm start` and the Docker image run it.
// (test/unit/origin-scripts.test.ts checks the rendered texts, test/unit/origin-script-netns.test.ts runs them against the kernel.)
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { matchesGlob, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { renderOriginScripts } from '../../server/domain/origin-scripts.ts';
import { BODY_MARKER, ORIGIN_SCRIPT_FILE, ORIGIN_UNIT_FILE, UNIT_PLACEHOLDERS, scriptBody, unitTemplate } from '../../server/domain/origin-script/templates.ts';
import { ORIGIN_SCRIPT_PARAMS } from '../helpers/origin-script-params.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const scriptPath = fileURLToPath(ORIGIN_SCRIPT_FILE);
const unitPath = fileURLToPath(ORIGIN_UNIT_FILE);
const scriptText = readFileSync(scriptPath, 'utf8');
const unitText = readFileSync(unitPath, 'utf8');

const base = ORIGIN_SCRIPT_PARAMS;

function run(cmd: string, args: string[], cwd?: string) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', cwd, timeout: 60_000 });
  if (r.error) throw r.error;
  return { status: r.status, out: r.stdout + r.stderr, stdout: r.stdout, stderr: r.stderr };
}

/** The names a text declares with `readonly NAME=` lines, in order. */
const readonlyNames = (text: string) => [...text.matchAll(/^readonly ([A-Z_]+)=/gm)].map((m) => m[1]!);

describe('origin.sh, the file itself', () => {
  it('parses with bash -n', () => {
    const r = run('bash', ['-n', scriptPath]);
    expect(r.out).toBe('');
    expect(r.status).toBe(0);
  });

  // shellcheck is required, not optional (.ci/run installs it): skipping would let a broken file pass.
  it('passes shellcheck -S style as it is', () => {
    expect(run('bash', ['-c', 'command -v shellcheck']).status, 'shellcheck is missing: apt-get install shellcheck').toBe(0);
    const r = run('shellcheck', ['-s', 'bash', '-S', 'style', '-f', 'gcc', scriptPath]);
    expect(r.out).toBe('');
    expect(r.status).toBe(0);
  });

  it('declares in its stand-in header exactly the names the rendered header declares, in order', () => {
    const standIn = scriptText.slice(0, scriptText.indexOf(BODY_MARKER));
    const rendered = renderOriginScripts(base).origin;
    const header = rendered.slice(0, rendered.length - scriptBody(scriptText).length);
    expect(readonlyNames(header)).toEqual(readonlyNames(standIn));
    expect(readonlyNames(standIn)).toContain('TUNNEL_ID');
    // The body never declares one of them again (readonly twice is a runtime error under set -e).
    const body = scriptBody(scriptText);
    for (const name of readonlyNames(standIn)) expect(body).not.toMatch(new RegExp(`^readonly ${name}=`, 'm'));
  });

  it('refuses to run as it is, before it changes anything', () => {
    const r = run('bash', [scriptPath, '--help']);
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe("tunnelgate: error: this is the template, not a tunnel's script: fetch yours with GET /api/dedicated/{id}/setup\n");
  });
});

describe('what the gateway serves', () => {
  it("is the rendered header, then origin.sh's body byte for byte", () => {
    const body = scriptBody(scriptText);
    expect(body.startsWith('readonly GRE_TTL=255\n')).toBe(true);
    for (const p of [base, { ...base, greKey: null, tunnelName: 'tg-other', routeTable: 7 }]) {
      const { origin } = renderOriginScripts(p);
      expect(origin.endsWith(body)).toBe(true);
      const header = origin.slice(0, origin.length - body.length);
      expect(header.startsWith('#!/usr/bin/env bash\n')).toBe(true);
      // Nothing of the stand-in header reaches a buyer.
      expect(origin).not.toContain(BODY_MARKER);
      expect(origin).not.toContain('stand-in');
      expect(origin).not.toContain("this is the template, not a tunnel's script");
    }
  });

  it('fills every placeholder of the unit template', () => {
    const { systemd_origin } = renderOriginScripts(base);
    expect(systemd_origin).not.toMatch(/@[A-Z_]+@/);
    // The template's own text around the placeholders is kept exactly.
    const pattern = unitText.split(/@[A-Z_]+@/).map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.+?');
    expect(systemd_origin).toMatch(new RegExp(`^${pattern}$`, 's'));
  });
});

describe('the template guards', () => {
  it('the body starts after exactly one marker line', () => {
    expect(scriptBody(`#!/bin/bash\n${BODY_MARKER}\necho hi\n`)).toBe('echo hi\n');
    expect(() => scriptBody('#!/bin/bash\necho hi\n')).toThrow(/must appear exactly once/);
    expect(() => scriptBody(`${BODY_MARKER}\n${BODY_MARKER}\n`)).toThrow(/must appear exactly once/);
  });

  it('the unit template uses every placeholder and no other', () => {
    expect(unitTemplate(unitText)).toBe(unitText);
    expect(() => unitTemplate(`${unitText}# @TUNNEL_MTU@\n`)).toThrow(/unknown: TUNNEL_MTU/);
    expect(() => unitTemplate(unitText.replaceAll('@EDGE_IP@', '192.0.2.2'))).toThrow(/unused: EDGE_IP/);
    for (const name of UNIT_PLACEHOLDERS) expect(unitText).toContain(`@${name}@`);
  });
});

describe('the files ship with the gateway', () => {
  it('are found from the module directory under the project loader (npm start), whatever the working directory', () => {
    const node = resolve(ROOT, 'node_modules/.bin/node');
    const loader = pathToFileURL(resolve(ROOT, 'loader/register.mjs')).href;
    const mod = pathToFileURL(resolve(ROOT, 'server/domain/origin-scripts.ts')).href;
    const code = `const m = await import(${JSON.stringify(mod)}); process.stdout.write(JSON.stringify(m.renderOriginScripts(${JSON.stringify(base)})));`;
    const r = run(node, ['--import', loader, '--input-type=module', '-e', code], tmpdir());
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual(renderOriginScripts(base));
  });

  it('are copied into the Docker image and not excluded by .dockerignore', () => {
    const dockerfile = readFileSync(resolve(ROOT, 'Dockerfile'), 'utf8');
    const ignore = readFileSync(resolve(ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    // COPY <src...> <dest> lines, without --flags; a source copies a file when it is the file or a folder above it.
    const sources = [...dockerfile.matchAll(/^COPY\s+(.+)$/gm)].flatMap((m) => m[1]!.split(/\s+/).filter((w) => !w.startsWith('--')).slice(0, -1));
    for (const file of [scriptPath, unitPath]) {
      const rel = relative(ROOT, file);
      const copiedBy = sources.filter((s) => {
        const src = s.replace(/^\.\//, '').replace(/\/$/, '');
        return src === '.' || rel === src || rel.startsWith(`${src}/`);
      });
      expect(copiedBy, `${rel} is not copied by any COPY line of the Dockerfile`).not.toEqual([]);
      // A .dockerignore pattern excludes a path that it matches, or any folder above it.
      const parts = rel.split('/');
      const prefixes = parts.map((_, i) => parts.slice(0, i + 1).join('/'));
      const excludedBy = ignore.filter((pat) => !pat.startsWith('!') && prefixes.some((p) => matchesGlob(p, pat.replace(/^\//, ''))));
      expect(excludedBy, `${rel} is excluded from the Docker build context`).toEqual([]);
    }
  });
});
