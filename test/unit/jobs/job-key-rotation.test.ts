// Rotating the gateway's job-signing key without downtime (issue 13 item 4, README "Rotating the
// job-signing key"): AGENT_JOB_KEY may hold the old and the new key, and the agent then accepts a job
// signed by either, as the gateway signs it (server/edge/job-signing.ts, one key named by its kid), so
// gateways can switch keys one by one while agents keep applying jobs from both. Keys are the gateway's own
// (parsed by its secret parser from PEMs like `openssl genpkey` makes); jobs go through the agent's
// configuration loader and verifier.
import { generateKeyPairSync } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../agent/config.ts';
import { verifyJob } from '../../../agent/jobs/verify.ts';
import { signJob } from '../../../server/edge/job-signing.ts';
import { parseSecret } from '../../../server/secrets.ts';
import { agentEnv, ctx, NODE, resetVerifier, T0, tunnel } from './fixtures.ts';

/** A gateway job-signing key as JOB_SIGNING_KEY holds it, parsed as the gateway parses it. */
const gatewayKey = () => parseSecret('job_signing_key', generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }).toString());
const oldKey = gatewayKey();
const newKey = gatewayKey();
const intruder = gatewayKey();

/** What `node add` prints as gateway_job_public_key, as the agent's variable holds it. */
const jwkText = (k: ReturnType<typeof gatewayKey>) => JSON.stringify(k.publicJwk);
/** The public key as `openssl pkey -pubout` prints it (SPKI PEM). */
const pemOf = (k: ReturnType<typeof gatewayKey>) => k.publicKey.export({ format: 'pem', type: 'spki' }).toString();

/** The verdict of an agent configured with AGENT_JOB_KEY=`value` on a job the gateway signs with `key`. */
async function verdict(value: string, key: ReturnType<typeof gatewayKey>, kid = key.kid): Promise<string> {
  const config = loadConfig(agentEnv({ AGENT_JOB_KEY: value }));
  const jws = await signJob(key.privateKey, kid, NODE, 'apply', { tunnel: tunnel() }, { now: T0 });
  const out = await verifyJob(jws, ctx({ jobKeys: config.jobKeys }));
  return out.ok ? 'ok' : out.error;
}

beforeEach(resetVerifier);

describe('AGENT_JOB_KEY with two keys (a rotation)', () => {
  it('the two JWKs node add printed, as a JSON array: jobs signed by either key pass, by a third key never', async () => {
    const both = JSON.stringify([oldKey.publicJwk, newKey.publicJwk]);
    expect(loadConfig(agentEnv({ AGENT_JOB_KEY: both })).jobKeys.map((k) => k.kid)).toEqual([oldKey.kid, newKey.kid]);
    expect(await verdict(both, oldKey)).toBe('ok');
    expect(await verdict(both, newKey)).toBe('ok');
    expect(await verdict(both, intruder)).toBe('invalid_signature');
    // A third key naming a trusted kid is tried against that key only, and fails its signature.
    expect(await verdict(both, intruder, oldKey.kid)).toBe('invalid_signature');
    expect(await verdict(both, intruder, newKey.kid)).toBe('invalid_signature');
  });

  it('the old JWK and the new key as openssl prints it (a PEM string in the array): both pass', async () => {
    const mixed = JSON.stringify([oldKey.publicJwk, pemOf(newKey)]);
    expect(await verdict(mixed, oldKey)).toBe('ok');
    expect(await verdict(mixed, newKey)).toBe('ok');
    expect(await verdict(mixed, intruder)).toBe('invalid_signature');
  });

  it('two PEM blocks, on one line with literal \\n as agent.conf holds them: both pass', async () => {
    const oneLine = (pemOf(oldKey) + pemOf(newKey)).trim().replace(/\n/g, '\\n');
    expect(loadConfig(agentEnv({ AGENT_JOB_KEY: oneLine })).jobKeys).toHaveLength(2);
    expect(await verdict(oneLine, oldKey)).toBe('ok');
    expect(await verdict(oneLine, newKey)).toBe('ok');
    expect(await verdict(oneLine, intruder)).toBe('invalid_signature');
  });

  it('before and after the rotation, one key: the other key is refused', async () => {
    expect(await verdict(jwkText(oldKey), oldKey)).toBe('ok');
    expect(await verdict(jwkText(oldKey), newKey)).toBe('invalid_signature');
    expect(await verdict(jwkText(newKey), newKey)).toBe('ok');
    expect(await verdict(jwkText(newKey), oldKey)).toBe('invalid_signature');
  });

  it('refuses at start, naming AGENT_JOB_KEY: more than two keys, the same key twice, an empty list, a bad item', () => {
    const bad: [string, RegExp][] = [
      [JSON.stringify([oldKey.publicJwk, newKey.publicJwk, intruder.publicJwk]), /at most two keys/],
      [JSON.stringify([oldKey.publicJwk, pemOf(oldKey)]), /the same key/],
      ['[]', /non-empty JSON array/],
      [JSON.stringify([oldKey.publicJwk, 7]), /key 2 of the list must be a JWK object or a PEM string/],
      [JSON.stringify([oldKey.publicJwk, generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' })]), /key 2 of the list: .*private key/],
      [JSON.stringify([oldKey.publicJwk, 'not a pem']), /key 2 of the list: a PEM job key must be an SPKI public key/],
      ['[{"kty":"OKP"', /not valid JSON/],
    ];
    for (const [value, why] of bad) expect(() => loadConfig(agentEnv({ AGENT_JOB_KEY: value })), value).toThrow(new RegExp(`AGENT_JOB_KEY .*${why.source}`));
  });
});
