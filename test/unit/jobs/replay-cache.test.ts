// The agent's replay cache on disk (docs/CONTRACTS.md "Exact rules", replayed): kept across a restart, pruned,
// compacted, and read past a torn last line.
import { randomUUID } from 'node:crypto';
import { readFileSync, statSync, writeFileSync, appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { REPLAY_FILE, ReplayCache } from '../../../agent/jobs/replay-cache.ts';
import { T0, claims, token, resetVerifier, ctx, code, tmp, removeTempDirs } from './fixtures.ts';

beforeEach(resetVerifier);
afterAll(removeTempDirs);

describe('ReplayCache', () => {
  it('survives a restart: a jti used before a re-open is still refused after it', async () => {
    const dir = tmp();
    let now = T0;
    const a = await ReplayCache.open(dir, { now: () => now });
    const jti = randomUUID();
    expect(await a.use(jti, T0 + 90)).toBe(true);
    expect(await a.use(jti, T0 + 90)).toBe(false);
    await a.close();
    expect(statSync(join(dir, REPLAY_FILE)).mode & 0o777).toBe(0o600);
    const b = await ReplayCache.open(dir, { now: () => now });
    expect(await b.use(jti, T0 + 90)).toBe(false);
    expect(await b.use(jti.toUpperCase(), T0 + 90)).toBe(false);
    expect(b.size).toBe(1);
    // A token replayed through the verifier against the re-opened cache.
    const jws = await token(claims());
    expect(await code(jws, ctx({ replay: b }))).toBe('ok');
    await b.close();
    const c = await ReplayCache.open(dir, { now: () => now });
    expect(await code(jws, ctx({ replay: c }))).toBe('replayed');
    await c.close();
  });

  it('prunes expired entries, on open and in memory', async () => {
    const dir = tmp();
    let now = T0;
    const a = await ReplayCache.open(dir, { now: () => now });
    const short = randomUUID();
    const long = randomUUID();
    await a.use(short, T0 + 10);
    await a.use(long, T0 + 1000);
    expect(a.size).toBe(2);
    now = T0 + 11;
    expect(a.has(short)).toBe(false);
    expect(a.size).toBe(1);
    // An expired jti may be recorded again (its job could only be refused as expired anyway).
    expect(await a.use(short, T0 + 100)).toBe(true);
    now = T0 + 101;
    await a.close();
    const b = await ReplayCache.open(dir, { now: () => now });
    const lines = readFileSync(join(dir, REPLAY_FILE), 'utf8').trim().split('\n');
    expect(lines.map((l) => (JSON.parse(l) as { jti: string }).jti)).toEqual([long]);
    expect(b.has(long)).toBe(true);
    expect(b.has(short)).toBe(false);
    await b.close();
  });

  it('rewrites the log when it grows well past the live entries', async () => {
    const dir = tmp();
    let now = T0;
    const a = await ReplayCache.open(dir, { now: () => now, compactSlack: 5 });
    let last = '';
    for (let i = 0; i < 20; i++) {
      last = randomUUID();
      await a.use(last, now + 1);
      now += 11; // each entry has expired (and been pruned) before the next arrives
    }
    const lines = readFileSync(join(dir, REPLAY_FILE), 'utf8').trim().split('\n');
    // Without rewriting, 20 lines; with it, never more than live entries + slack + 1.
    expect(lines.length).toBeLessThanOrEqual(7);
    expect(lines.at(-1)).toContain(last);
    await a.close();
  });

  it('ignores a torn last line and reports it', async () => {
    const dir = tmp();
    const jti = randomUUID();
    writeFileSync(join(dir, REPLAY_FILE), `${JSON.stringify({ jti, until: T0 + 50 })}\n`);
    appendFileSync(join(dir, REPLAY_FILE), '{"jti":"1234');
    const warnings: string[] = [];
    const a = await ReplayCache.open(dir, { now: () => T0, warn: (m) => warnings.push(m) });
    expect(a.has(jti)).toBe(true);
    expect(warnings).toHaveLength(1);
    expect(readFileSync(join(dir, REPLAY_FILE), 'utf8')).toBe(`${JSON.stringify({ jti, until: T0 + 50 })}\n`);
    await a.close();
  });
});
