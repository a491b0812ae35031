// Rotating the gateway's job-signing key without downtime (docs/OPERATOR.md "Rotating the
// job-signing key"): AGENT_JOB_KEY may hold the old and the new key, and the agent then accepts a job
// signed by either, as the gateway signs it (server/edge/job-signing.ts, one key named by its kid), so
// gateways can switch keys one by one while agents keep applying jobs from both. Keys are the gateway's own
// (parsed by its secret parser from PEMs like `openssl genpkey` makes); jobs go through the agent's
// configuration loader and verifier.
import { spawnSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { join, resolve } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../agent/config.ts';
import { verifyJob } from '../../../agent/jobs/verify.ts';
import { signJob } from '../../../server/edge/job-signing.ts';
import { parseSecret } from '../../../server/secrets.ts';
import { onPath, skipUnless } from '../../helpers/requirements.ts';
import { agentEnv, ctx, NODE, resetVerifier, T0, tunnel } from './fixtures.ts';

const ROOT = resolve(import.meta.dirname, '../../..');

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
  it('a JWK Set of the two JWKs node add printed: jobs signed by either key pass, by a third key never', async () => {
    const both = JSON.stringify({ keys: [oldKey.publicJwk, newKey.publicJwk] });
    expect(loadConfig(agentEnv({ AGENT_JOB_KEY: both })).jobKeys.map((k) => k.kid)).toEqual([oldKey.kid, newKey.kid]);
    expect(await verdict(both, oldKey)).toBe('ok');
    expect(await verdict(both, newKey)).toBe('ok');
    expect(await verdict(both, intruder)).toBe('invalid_signature');
    // A third key naming a trusted kid is tried against that key only, and fails its signature.
    expect(await verdict(both, intruder, oldKey.kid)).toBe('invalid_signature');
    expect(await verdict(both, intruder, newKey.kid)).toBe('invalid_signature');
    // Told apart by kid: the new key's job under the old key's kid is refused.
    expect(await verdict(both, newKey, oldKey.kid)).toBe('invalid_signature');
  });

  it.skipIf(skipUnless(onPath('openssl'), 'rotation test: openssl'))('two PEMs as server/deploy/agent-job-key.sh prints them from the two JOB_SIGNING_KEY lines: both pass', async () => {
    // docs/OPERATOR.md's commands: the old key as .env holds it (quoted, one line) and a new one from openssl.
    const made = spawnSync('bash', [join(ROOT, 'server/deploy/make-env.sh')], { encoding: 'utf8' });
    const oldLine = made.stdout.split('\n').find((l) => l.startsWith('JOB_SIGNING_KEY='))!.slice('JOB_SIGNING_KEY='.length);
    const newLine = spawnSync('bash', ['-c', `openssl genpkey -algorithm ed25519 | awk 'NF {printf "%s\\\\n", $0}'`], { encoding: 'utf8' }).stdout;
    const printed = spawnSync('bash', [join(ROOT, 'server/deploy/agent-job-key.sh')], { input: `${oldLine}\n${newLine}\n`, encoding: 'utf8' });
    expect(printed.stderr).toBe('');
    expect(printed.status).toBe(0);
    const value = printed.stdout.trim();
    expect(value).not.toContain('PRIVATE');
    expect(value.match(/-----BEGIN PUBLIC KEY-----/g)).toHaveLength(2);
    const before = parseSecret('job_signing_key', oldLine.slice(1, -1));
    const after = parseSecret('job_signing_key', newLine);
    expect(loadConfig(agentEnv({ AGENT_JOB_KEY: value })).jobKeys.map((k) => k.thumbprint)).toEqual([before.kid, after.kid]);
    expect(await verdict(value, before)).toBe('ok');
    expect(await verdict(value, after)).toBe('ok');
    expect(await verdict(value, intruder)).toBe('invalid_signature');
    // After the rotation: the new key alone, as the same script prints it from one line.
    const single = spawnSync('bash', [join(ROOT, 'server/deploy/agent-job-key.sh')], { input: newLine, encoding: 'utf8' }).stdout.trim();
    expect(await verdict(single, after)).toBe('ok');
    expect(await verdict(single, before)).toBe('invalid_signature');
    // Garbage in: a clear error and a failed exit, never a half-printed value an operator could paste.
    const bad = spawnSync('bash', [join(ROOT, 'server/deploy/agent-job-key.sh')], { input: 'not a key\n', encoding: 'utf8' });
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(/line 1 is not a private key/);
  });

  it('before and after the rotation, one key: the other key is refused', async () => {
    expect(await verdict(jwkText(oldKey), oldKey)).toBe('ok');
    expect(await verdict(jwkText(oldKey), newKey)).toBe('invalid_signature');
    expect(await verdict(jwkText(newKey), newKey)).toBe('ok');
    expect(await verdict(jwkText(newKey), oldKey)).toBe('invalid_signature');
    expect(await verdict(pemOf(newKey), newKey)).toBe('ok');
    expect(await verdict(JSON.stringify({ keys: [newKey.publicJwk] }), newKey)).toBe('ok');
  });

  it('refuses at start, naming AGENT_JOB_KEY: more than two keys, one key twice, keys without kid in a set, bad items', () => {
    const set = (...keys: unknown[]) => JSON.stringify({ keys });
    const { kid: _kid, ...noKid } = newKey.publicJwk;
    const bad: [string, RegExp][] = [
      [set(oldKey.publicJwk, newKey.publicJwk, intruder.publicJwk), /at most two keys/],
      [pemOf(oldKey) + pemOf(newKey) + pemOf(intruder), /at most two keys/],
      [pemOf(oldKey) + pemOf(oldKey), /the same key/],
      [set(oldKey.publicJwk, { ...newKey.publicJwk, kid: oldKey.kid }), /same kid/],
      [set(oldKey.publicJwk, noKid), /key 2 of the JWK Set has no kid/],
      [set(), /non-empty array/],
      [JSON.stringify({ keys: 'x' }), /non-empty array/],
      [set(oldKey.publicJwk, 7), /key 2 of the JWK Set must be a JWK object/],
      [set(oldKey.publicJwk, { ...generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' }), kid: 'k' }), /key 2 of the JWK Set: .*private key/],
      [JSON.stringify([oldKey.publicJwk, newKey.publicJwk]), /must be an Ed25519 public key as a JWK/],
      ['{"keys": [', /not valid JSON/],
    ];
    for (const [value, why] of bad) expect(() => loadConfig(agentEnv({ AGENT_JOB_KEY: value })), value).toThrow(new RegExp(`AGENT_JOB_KEY .*${why.source}`));
  });
});
