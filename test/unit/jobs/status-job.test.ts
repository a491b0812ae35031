// Op `status` as the gateway signs it (docs/CONTRACTS.md "Versions"; server/edge/job-signing.ts
// signStatusJob): version 2 only, the standard claims and `op` with an empty body, verifiable with the
// gateway's public key. (The agent's side of the op comes with its health checks.)
import { compactVerify } from 'jose';
import { describe, expect, it } from 'vitest';
import { JobSigningError, signStatusJob } from '../../../server/edge/job-signing.ts';
import { NODE, T0, gateway, KID } from './fixtures.ts';

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
