// JobHandler: verify, then run on the dataplane (a FAKE here), answering the documented result line
// (docs/CONTRACTS.md "Exact rules"); AGENT_PROTECTED_POOLS at the handler; reconcile's per-tunnel `failed`.
import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../../common/log.ts';
import { ConfigError, loadConfig } from '../../../agent/config.ts';
import { JobHandler } from '../../../agent/jobs/handle.ts';
import { InvalidTunnel } from '../../../agent/dataplane/validate.ts';
import { KernelError } from '../../../agent/dataplane/types.ts';
import type { ReplayGuard } from '../../../agent/jobs/verify.ts';
import { OTHER_NODE, intruder, tunnel, claims, token, resetVerifier, ctx, RecordingDataplane, handlerWith, agentEnv, resultLineValidator } from './fixtures.ts';

beforeEach(resetVerifier);

describe('JobHandler', () => {
  it('runs each op and answers the documented result line', async () => {
    const dp = new RecordingDataplane();
    const { h, lines } = handlerWith(dp);
    const t = tunnel();
    const apply = await token(claims({ tunnel: t }));
    const jti = JSON.parse(Buffer.from(apply.split('.')[1]!, 'base64url').toString()).jti as string;
    expect(await h.handle(apply)).toEqual({ ok: true, jti, op: 'apply', result: { added: 1, changed: 0, removed: 0, unchanged: 0 } });
    expect(await h.handle(await token(claims({ tunnel: t })))).toMatchObject({ ok: true, result: { added: 0, changed: 0, removed: 0, unchanged: 1 } });
    expect(await h.handle(await token(claims({ op: 'probe', tunnel: t })))).toMatchObject({ ok: true, op: 'probe', result: { reachable: true, rtt_ms: 1.5 } });
    dp.probeAnswer = { reachable: false };
    const probe = await h.handle(await token(claims({ op: 'probe', tunnel: t })));
    expect(probe).toMatchObject({ ok: true, result: { reachable: false } });
    expect(probe.ok && 'rtt_ms' in probe.result).toBe(false);
    expect(await h.handle(await token(claims({ op: 'reconcile', tunnel: undefined, tunnels: [] })))).toMatchObject({ ok: true, op: 'reconcile', result: { added: 0, changed: 0, removed: 1, unchanged: 0 } });
    // Removing a tunnel that is not there: ok with removed 0.
    expect(await h.handle(await token(claims({ op: 'remove', tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip } })))).toEqual(
      expect.objectContaining({ ok: true, op: 'remove', result: { added: 0, changed: 0, removed: 0, unchanged: 0 } }),
    );
    expect(lines.filter((l) => l.msg === 'job done')).toHaveLength(6);
  });

  it('status (v 2): answers what the status source gives, shape-checked; without a source kernel_error; v 1 refused', async () => {
    const dp = new RecordingDataplane();
    const lines: Record<string, unknown>[] = [];
    const log = createLogger('debug', {}, (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
    const dropped = { not_allowed: 1, rate_limited: 0, spoofed: 2, invalid: 0, fragment: 0 };
    const report = { agent: { version: '1.2.3', uptime_s: 5, tunnels: 1 }, tunnels: [{ id: tunnel().id, health: 'up' as const, checked_at: new Date(0).toISOString(), rtt_ms: 0.5, counters: { packets_in: 3, bytes_in: 300, packets_out: 2, bytes_out: 200, dropped } }] };
    let answer: unknown = report;
    const h = new JobHandler(ctx(), dp, log, async () => answer as typeof report);
    const valid = resultLineValidator();
    const line = await h.handle(await token(claims({ v: 2, op: 'status', tunnel: undefined })));
    expect(line).toMatchObject({ ok: true, op: 'status', result: report });
    expect(valid(line), JSON.stringify(valid.errors)).toBe(true);
    expect(dp.calls).toEqual([]);
    // A source answering a wrong shape is never passed on: the gateway would refuse it.
    answer = { ...report, tunnels: [{ ...report.tunnels[0], health: 'fine' }] };
    expect(await h.handle(await token(claims({ v: 2, op: 'status', tunnel: undefined })))).toMatchObject({ ok: false, error: 'kernel_error' });
    expect(await h.handle(await token(claims({ v: 1, op: 'status', tunnel: undefined })))).toMatchObject({ ok: false, error: 'unsupported_command' });
    const bare = handlerWith(dp);
    expect(await bare.h.handle(await token(claims({ v: 2, op: 'status', tunnel: undefined })))).toMatchObject({ ok: false, error: 'kernel_error' });
  });

  it('result counts always carry all four keys', async () => {
    const dp = new RecordingDataplane();
    dp.partialCounts = true;
    const { h } = handlerWith(dp);
    const out = await h.handle(await token());
    expect(out).toMatchObject({ ok: true, result: { added: 1, changed: 0, removed: 0, unchanged: 0 } });
  });

  it('refuses before the dataplane is touched, and logs the code', async () => {
    const dp = new RecordingDataplane();
    const { h, lines } = handlerWith(dp);
    const jti = randomUUID();
    const out = await h.handle(await token(claims({ jti }), {}, intruder.privateKey), { peer: '192.0.2.1:5000' });
    expect(out).toMatchObject({ ok: false, jti, error: 'invalid_signature' });
    expect(dp.calls).toEqual([]);
    expect(lines).toContainEqual(expect.objectContaining({ level: 'warn', msg: 'job refused', code: 'invalid_signature', jti, peer: '192.0.2.1:5000' }));
    for (const [jws, c] of [
      ['garbage', 'malformed'],
      [await token(claims({ aud: OTHER_NODE })), 'wrong_audience'],
      [await token(claims({ v: 4 })), 'unsupported_version'],
    ] as const) {
      expect(await h.handle(jws)).toMatchObject({ ok: false, error: c });
      expect(lines.at(-1)).toMatchObject({ msg: 'job refused', code: c });
    }
    expect(dp.calls).toEqual([]);
  });

  it('probe of a tunnel this node does not have: unknown_tunnel, without probing', async () => {
    const dp = new RecordingDataplane();
    const { h, lines } = handlerWith(dp);
    const t = tunnel();
    const out = await h.handle(await token(claims({ op: 'probe', tunnel: t })));
    expect(out).toMatchObject({ ok: false, error: 'unknown_tunnel' });
    expect(dp.calls.map((c) => c.op)).toEqual(['has']);
    expect(lines.at(-1)).toMatchObject({ msg: 'job refused', code: 'unknown_tunnel' });
  });

  it('a dataplane failure is kernel_error, and the jti stays used', async () => {
    const dp = new RecordingDataplane();
    dp.failWith = new KernelError('create GRE link tg-abcdefghij: Operation not supported (Unknown device type)');
    const { h, lines } = handlerWith(dp);
    const jws = await token();
    const out = await h.handle(jws);
    expect(out).toMatchObject({ ok: false, error: 'kernel_error', error_description: 'create GRE link tg-abcdefghij: Operation not supported (Unknown device type)' });
    expect(out.ok === false && typeof out.jti).toBe('string');
    expect(lines.at(-1)).toMatchObject({ level: 'error', msg: 'job failed', code: 'kernel_error' });
    dp.failWith = undefined;
    expect(await h.handle(jws)).toMatchObject({ ok: false, error: 'replayed' });
    expect(dp.calls).toHaveLength(1);
  });

  it('the dataplane finding a tunnel unusable (InvalidTunnel) is malformed', async () => {
    const dp = new RecordingDataplane();
    const inner = new InvalidTunnel('tunnel_name x does not start with the agent\'s link prefix tg-');
    dp.failWith = Object.assign(new KernelError(`apply: ${inner.message}`), { cause: inner });
    const { h } = handlerWith(dp);
    expect(await h.handle(await token())).toMatchObject({ ok: false, error: 'malformed', error_description: expect.stringContaining('link prefix') });
  });

  it('a replay cache that cannot be written refuses the job', async () => {
    const dp = new RecordingDataplane();
    const lines: string[] = [];
    const broken: ReplayGuard = { use: async () => Promise.reject(new Error('EROFS: read-only file system')) };
    const h = new JobHandler(ctx({ replay: broken }), dp, createLogger('debug', {}, (l) => lines.push(l)));
    expect(await h.handle(await token())).toMatchObject({ ok: false, error: 'kernel_error', error_description: expect.stringContaining('EROFS') });
    expect(dp.calls).toEqual([]);
  });
});
// ---------------------------------------------------------------------------------------------------

describe('AGENT_PROTECTED_POOLS (docs/CONTRACTS.md "Hardening of the listener")', () => {
  const configWith = (over: Record<string, string>) => loadConfig(agentEnv(over));
  const handlerWithPools = (pools: string) => {
    const dp = new RecordingDataplane();
    const lines: Record<string, unknown>[] = [];
    const config = configWith({ AGENT_PROTECTED_POOLS: pools });
    const h = new JobHandler(ctx({ protectedPools: config.protectedPools! }), dp, createLogger('debug', {}, (l) => lines.push(JSON.parse(l) as Record<string, unknown>)));
    return { h, dp, lines };
  };
  const other = () => tunnel({ id: randomUUID(), tunnel_name: 'tg-other', protected_ip: '198.18.0.9', edge_inner: '100.64.0.5/30', origin_inner: '100.64.0.6/30' });

  it('a job whose protected_ip lies outside the pools is wrong_audience, before the dataplane is touched', async () => {
    const { h, dp, lines } = handlerWithPools('203.0.113.0/28, 192.0.2.128/25');
    const inside = tunnel(); // 203.0.113.10
    const outside = tunnel({ protected_ip: '203.0.113.16' }); // just past the /28
    expect(await h.handle(await token(claims({ tunnel: inside })))).toMatchObject({ ok: true, op: 'apply' });
    for (const c of [
      claims({ tunnel: outside }),
      claims({ op: 'probe', tunnel: outside }),
      claims({ op: 'remove', tunnel: { id: outside.id, tunnel_name: outside.tunnel_name, protected_ip: outside.protected_ip } }),
      // One tunnel of a reconcile outside is enough.
      claims({ op: 'reconcile', tunnel: undefined, tunnels: [inside, other()] }),
    ]) {
      const out = await h.handle(await token(c));
      expect(out).toMatchObject({ ok: false, error: 'wrong_audience', error_description: expect.stringContaining('outside this router\'s protected pools') });
      expect(lines.at(-1)).toMatchObject({ msg: 'job refused', code: 'wrong_audience' });
    }
    expect(dp.calls.map((c) => c.op)).toEqual(['apply']);
    // The second pool counts too; a reconcile whose tunnels all lie inside runs.
    const second = other();
    second.protected_ip = '192.0.2.200';
    expect(await h.handle(await token(claims({ op: 'reconcile', tunnel: undefined, tunnels: [inside, second] })))).toMatchObject({ ok: true, op: 'reconcile' });
  });

  it('unset means any protected IP; a malformed value is a configuration error', async () => {
    expect(configWith({}).protectedPools).toBeUndefined();
    const dp = new RecordingDataplane();
    const h = new JobHandler(ctx(), dp, createLogger('silent'));
    expect(await h.handle(await token(claims({ tunnel: other() })))).toMatchObject({ ok: true });
    for (const bad of ['203.0.113.0/33', '2001:db8::/32', 'pool-a', '203.0.113.0/28,,']) {
      expect(() => configWith({ AGENT_PROTECTED_POOLS: bad }), bad).toThrow(ConfigError);
    }
    expect(() => configWith({ AGENT_ALLOW_FROM: '10.0.0.0/8, 2001:db8::/32' })).not.toThrow();
    expect(() => configWith({ AGENT_ALLOW_FROM: '10.0.0.0/40' })).toThrow(/AGENT_ALLOW_FROM/);
  });
});
// ---------------------------------------------------------------------------------------------------

describe('reconcile reports tunnels the kernel refused, per tunnel, so one broken tunnel does not block its node', () => {
  const validateLine = resultLineValidator();
  const second = () => tunnel({ id: randomUUID(), tunnel_name: 'tg-second', protected_ip: '203.0.113.11', edge_inner: '100.64.0.5/30', origin_inner: '100.64.0.6/30' });

  it('ok: true with the counts and `failed` (always present), each {id, error: kernel_error, error_description}; the line matches the schema', async () => {
    const dp = new RecordingDataplane();
    const { h, lines } = handlerWith(dp);
    const [a, b] = [tunnel(), second()];
    const clean = await h.handle(await token(claims({ op: 'reconcile', tunnel: undefined, tunnels: [a, b] })));
    expect(clean).toMatchObject({ ok: true, op: 'reconcile', result: { added: 2, changed: 0, removed: 0, unchanged: 0, failed: [] } });
    expect(validateLine(clean), JSON.stringify(validateLine.errors)).toBe(true);

    dp.refuse.set(b.id, 'link tg-second exists and was not created by this agent');
    const out = await h.handle(await token(claims({ op: 'reconcile', tunnel: undefined, tunnels: [a, { ...b, mtu: 1400 }] })));
    expect(out).toEqual({
      ok: true,
      jti: expect.any(String),
      op: 'reconcile',
      result: { added: 0, changed: 0, removed: 0, unchanged: 1, failed: [{ id: b.id, error: 'kernel_error', error_description: 'link tg-second exists and was not created by this agent' }] },
    });
    expect(validateLine(out), JSON.stringify(validateLine.errors)).toBe(true);
    expect(lines).toContainEqual(expect.objectContaining({ level: 'warn', msg: 'tunnel failed in reconcile', tunnel_id: b.id, code: 'kernel_error' }));
    // apply keeps its result (no `failed`), and a broken apply is still ok: false kernel_error.
    const apply = await h.handle(await token(claims({ tunnel: a })));
    expect(apply.ok && 'failed' in apply.result).toBe(false);
    expect(validateLine(apply)).toBe(true);
    dp.failWith = new KernelError('apply: link tg-second exists and was not created by this agent');
    const broken = await h.handle(await token(claims({ tunnel: b })));
    expect(broken).toMatchObject({ ok: false, error: 'kernel_error' });
    expect(validateLine(broken)).toBe(true);
    // The schema holds the agent to the contract: `failed` missing or with another code does not validate.
    expect(validateLine({ ...clean, result: { added: 2, changed: 0, removed: 0, unchanged: 0 } })).toBe(false);
    expect(validateLine({ ...out, result: { ...(out.ok ? out.result : {}), failed: [{ id: b.id, error: 'malformed', error_description: 'x' }] } })).toBe(false);
  });
});
