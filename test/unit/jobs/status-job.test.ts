// Op `status` as the gateway signs it (docs/CONTRACTS.md "Versions"; server/edge/job-signing.ts
// signStatusJob): version 2 only, the standard claims and `op` with an empty body, verifiable with the
// gateway's public key. (The agent's side of the op comes with its health checks.)
import { compactVerify } from 'jose';
import { describe, expect, it } from 'vitest';
import { JobSigningError, signStatusJob } from '../../../server/edge/job-signing.ts';
import { verifyJob } from '../../../agent/jobs/verify.ts';
import { NODE, T0, gateway, KID, claims, code, ctx, resetVerifier, token } from './fixtures.ts';

describe('signStatusJob', () => {
  it('signs {iss, aud, jti, iat, exp, v: 2, op: "status"} and nothing else, with the job header', async () => {
    const jws = await signStatusJob(gateway.privateKey, KID, NODE, { version: 2, now: T0 });
    const { payload, protectedHeader } = await compactVerify(jws, gateway.publicKey);
    expect(protectedHeader).toEqual({ alg: 'EdDSA', typ: 'tunnel-job+jwt', kid: KID });
    const c = JSON.parse(Buffer.from(payload).toString()) as Record<string, unknown>;
    expect(Object.keys(c)).toEqual(['iss', 'aud', 'jti', 'iat', 'exp', 'v', 'op']);
    expect(c).toMatchObject({ iss: 'tunnelgate', aud: NODE, iat: T0, exp: T0 + 60, v: 2, op: 'status' });
  });

  it('refuses version 1: an agent that did not list 2 never gets a status job', async () => {
    await expect(signStatusJob(gateway.privateKey, KID, NODE, { version: 1 })).rejects.toThrow(JobSigningError);
  });
});

describe('status with since (hello feature status_delta)', () => {
  it('signs since (null or a cursor) as the one body claim, and the agent verifies it as a status job carrying it', async () => {
    resetVerifier();
    for (const since of [null, { epoch: 'e1', seq: 41 }]) {
      const jws = await signStatusJob(gateway.privateKey, KID, NODE, { version: 2, now: T0, since });
      const c = JSON.parse(Buffer.from((await compactVerify(jws, gateway.publicKey)).payload).toString()) as Record<string, unknown>;
      expect(Object.keys(c)).toEqual(['iss', 'aud', 'jti', 'iat', 'exp', 'v', 'op', 'since']);
      const out = await verifyJob(jws, ctx());
      expect(out.ok && out.job.op === 'status' ? out.job.since : 'refused').toEqual(since);
    }
  });

  it('refuses a since that is not null or {epoch, seq}, and any other claim, as malformed', async () => {
    resetVerifier();
    await expect(signStatusJob(gateway.privateKey, KID, NODE, { version: 2, since: { epoch: '', seq: 1 } })).rejects.toThrow(JobSigningError);
    const bad = [{ epoch: 'e', seq: -1 }, { epoch: 'e', seq: 1.5 }, { epoch: 'e' }, { epoch: 'e', seq: 1, more: 1 }, 'e:1', { epoch: 'x'.repeat(65), seq: 1 }];
    for (const since of bad) expect(await code(await token(claims({ v: 2, op: 'status', tunnel: undefined, since })))).toBe('malformed');
    expect(await code(await token(claims({ v: 2, op: 'status', tunnel: undefined, since: null, ids: [] })))).toBe('malformed');
    expect(await code(await token(claims({ v: 2, op: 'status', tunnel: undefined })))).toBe('ok');
  });
});
