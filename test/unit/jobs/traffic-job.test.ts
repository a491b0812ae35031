// Op `traffic` (docs/CONTRACTS.md "Live traffic"): the gateway signs it only for versions 2 and 3 with a body
// the agent accepts (server/edge/job-signing.ts signTrafficJob), and the agent's handler answers it from its ring
// with ids in canonical case, or kernel_error when it keeps no ring. The body's shape rules against the schema
// are in gateway-contract.test.ts.
import { compactVerify } from 'jose';
import { beforeEach, describe, expect, it } from 'vitest';
import { JobSigningError, signTrafficJob } from '../../../server/edge/job-signing.ts';
import { JobHandler } from '../../../agent/jobs/handle.ts';
import { TrafficRing } from '../../../agent/traffic/ring.ts';
import { NODE, T0, gateway, KID, RecordingDataplane, claims, ctx, resetVerifier, token } from './fixtures.ts';

const ID = '6F1C9E64-2F4E-4C1B-9A57-0D7C3B1E2A10';
const log = { info: () => {}, warn: () => {}, error: () => {} };

describe('signTrafficJob', () => {
  it('signs ids and since as claims beside the standard ones, version 2 or 3 only', async () => {
    const jws = await signTrafficJob(gateway.privateKey, KID, NODE, { ids: [ID], since: '2030-03-17T17:46:40Z' }, { version: 3, now: T0 });
    const c = JSON.parse(Buffer.from((await compactVerify(jws, gateway.publicKey)).payload).toString()) as Record<string, unknown>;
    expect(Object.keys(c)).toEqual(['iss', 'aud', 'jti', 'iat', 'exp', 'v', 'op', 'ids', 'since']);
    expect(c).toMatchObject({ v: 3, op: 'traffic', ids: [ID], since: '2030-03-17T17:46:40Z' });
    const bare = JSON.parse(Buffer.from((await compactVerify(await signTrafficJob(gateway.privateKey, KID, NODE, { ids: [ID] }, { version: 2, now: T0 }), gateway.publicKey)).payload).toString()) as Record<string, unknown>;
    expect('since' in bare).toBe(false);
    await expect(signTrafficJob(gateway.privateKey, KID, NODE, { ids: [ID] }, { version: 1 })).rejects.toThrow(JobSigningError);
    await expect(signTrafficJob(gateway.privateKey, KID, NODE, { ids: [] }, { version: 2 })).rejects.toThrow(/ids must hold 1 to 100/);
    await expect(signTrafficJob(gateway.privateKey, KID, NODE, { ids: [ID], since: 'now' }, { version: 2 })).rejects.toThrow(/since/);
  });
});

describe('the agent answers op traffic', () => {
  beforeEach(() => resetVerifier());

  it('from its ring, the ids lower-cased, the points after since', async () => {
    const ring = new TrafficRing();
    const id = ID.toLowerCase();
    const s0 = 1_900_000_000;
    ring.observe(s0 * 1000, id, [0, 0, 0, 0, 0, 0, 0, 0, 0]);
    ring.observe((s0 + 1) * 1000, id, [5, 50, 0, 0, 0, 0, 0, 0, 0]);
    ring.observe((s0 + 2) * 1000, id, [7, 70, 0, 0, 0, 0, 2, 0, 0]);
    const h = new JobHandler(ctx(), new RecordingDataplane(), log, undefined, (ids, since) => ring.answer(ids, since));
    const all = await h.handle(await token(claims({ v: 2, op: 'traffic', tunnel: undefined, ids: [ID] })));
    expect(all).toMatchObject({ ok: true, op: 'traffic', result: { window_s: 300, tunnels: [{ id, points: [{ pps_in: 5, bps_in: 400 }, { pps_in: 2, dropped: { spoofed: 2 } }] }] } });
    const after = await h.handle(await token(claims({ v: 2, op: 'traffic', tunnel: undefined, ids: [ID], since: new Date((s0 + 1) * 1000).toISOString() })));
    expect(after.ok && (after.result as { tunnels: { points: unknown[] }[] }).tunnels[0]!.points).toHaveLength(1);
  });

  it('kernel_error from an agent that keeps no ring (started without health checks)', async () => {
    const h = new JobHandler(ctx(), new RecordingDataplane(), log);
    expect(await h.handle(await token(claims({ v: 2, op: 'traffic', tunnel: undefined, ids: [ID] })))).toMatchObject({ ok: false, error: 'kernel_error' });
  });
});
