// What a job carries of a tunnel's attack settings (docs/CONTRACTS.md "Attacks"): `policy.max_flows` and
// `policy.alert_pps` go only to an agent whose hello lists the feature `attacks`. An agent from before them checks
// a policy's keys strictly and would refuse the whole job as malformed, so for it they are left out: its tunnels
// keep their other settings, and it has no attack detection for alert_pps to tune (nor a meter max_flows bounds).
import { FEATURE_ATTACKS, type JobBodies, type Op } from '../../common/job-contract.ts';
import type { TunnelSpec } from '../../common/tunnel-spec.ts';

/** Whether an agent with these hello features takes max_flows and alert_pps. */
export function takesAttackSettings(features: readonly string[] | undefined): boolean {
  return features?.includes(FEATURE_ATTACKS) === true;
}

function specWithout(t: TunnelSpec): TunnelSpec {
  if (t.policy === undefined || (t.policy.max_flows === undefined && t.policy.alert_pps === undefined)) return t;
  const { max_flows: _f, alert_pps: _a, ...policy } = t.policy;
  return { ...t, policy };
}

/** The body as an agent with `features` takes it (the same object when nothing has to go). */
export function attackSettingsFor<O extends Op>(op: O, body: JobBodies[O], features: readonly string[] | undefined): JobBodies[O] {
  if (takesAttackSettings(features) || op === 'status') return body;
  if (op === 'reconcile') return { tunnels: (body as JobBodies['reconcile']).tunnels.map(specWithout) } as JobBodies[O];
  return { tunnel: specWithout((body as JobBodies['apply']).tunnel) } as JobBodies[O];
}
