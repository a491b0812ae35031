// What a job carries of max_flows and alert_pps (server/attacks/wire.ts): only to an agent whose hello lists
// `attacks`, since an older agent's verifier refuses a policy with keys it does not know.
import { beforeEach, describe, expect, it } from 'vitest';
import { attackSettingsFor } from '../../../server/attacks/wire.ts';
import { signJob } from '../../../server/edge/job-signing.ts';
import { DEFAULT_POLICY } from '../../../common/tunnel-policy.ts';
import { KID, NODE, T0, code, gateway, resetVerifier, tunnel } from '../jobs/fixtures.ts';

beforeEach(resetVerifier);

describe('attackSettingsFor', () => {
  const a = tunnel({ policy: { ...DEFAULT_POLICY, syn_proxy: true, max_flows: 2_000, alert_pps: 300 } });
  const b = tunnel({ id: '7d3c4b0e-2f7a-4c8e-9a51-0b6f1f9b2c12', tunnel_name: 'tg-other', protected_ip: '203.0.113.99', policy: { ...DEFAULT_POLICY, ports: [[80, 80]] } });
  const plain = tunnel({ id: '7d3c4b0e-2f7a-4c8e-9a51-0b6f1f9b2c13', tunnel_name: 'tg-plain', protected_ip: '203.0.113.98' });

  it('an agent that lists `attacks` gets the body as it is', () => {
    const body = { tunnels: [a, b, plain] };
    expect(attackSettingsFor('reconcile', body, ['attacks'])).toBe(body);
  });

  it('an agent without it (or before features) gets the policies without them, everything else kept', () => {
    for (const features of [undefined, [], ['later']]) {
      expect(attackSettingsFor('apply', { tunnel: a }, features)).toEqual({ tunnel: { ...a, policy: { ...DEFAULT_POLICY, syn_proxy: true } } });
      const r = attackSettingsFor('reconcile', { tunnels: [a, b, plain] }, features);
      expect(r.tunnels.map((t) => t.policy)).toEqual([{ ...DEFAULT_POLICY, syn_proxy: true }, b.policy, undefined]);
      // Untouched tunnels are the same objects.
      expect(r.tunnels[1]).toBe(b);
      expect(r.tunnels[2]).toBe(plain);
    }
  });

  it("the agent's verifier takes both forms from a gateway that follows the rule", async () => {
    for (const features of [['attacks'], []]) {
      const jws = await signJob(gateway.privateKey, KID, NODE, 'apply', attackSettingsFor('apply', { tunnel: a }, features), { now: T0, version: 2 });
      expect(await code(jws)).toBe('ok');
    }
  });
});
