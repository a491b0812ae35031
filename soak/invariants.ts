// The soak's invariants (docs/SOAK.md "Invariants"), each a named function that reads the database (and,
// for the edge state, the kernel) and answers what it found: the report lists them by name, and
// test/integration/soak-invariants.test.ts breaks each rule on purpose to see its check fail.
//
// Two kinds. A `safety` rule must hold at every instant, fault or not (money, IPs, no job run twice): one
// failed read is a failure. A `liveness` rule is one the system restores after a fault (the edge matches
// the database, nothing stuck in the queue, every webhook delivered): the soak polls it after each fault and
// reports how long it took to hold again. Liveness rules are asked about what existed at a `cutoff` (the
// database's clock when the wait began), because the load keeps creating new work meanwhile.
import type { EdgeObservation, SoakEdge } from './edges.ts';

/** What the checks need of a connection: pg's Client, PoolClient or Pool. */
export interface Queryable {
  query<R extends Record<string, unknown> = Record<string, unknown>>(text: string, values?: unknown[]): Promise<{ rows: R[] }>;
}

export type CheckKind = 'safety' | 'liveness';

export interface CheckResult {
  name: string;
  kind: CheckKind;
  ok: boolean;
  /** The violations found (at most MAX_FOUND, each one line), empty when ok. */
  found: string[];
  /** How much was looked at (accounts, tunnels, deliveries...): a check that looked at nothing says so. */
  looked: number;
}

const MAX_FOUND = 20;

function result(name: string, kind: CheckKind, found: string[], looked: number): CheckResult {
  return { name, kind, ok: found.length === 0, found: found.slice(0, MAX_FOUND), looked };
}

// --- money ---

/** Every account's ledger rows sum to its balance, and each row's balance_after follows from the one before. */
export async function ledgerSumsToBalance(db: Queryable): Promise<CheckResult> {
  const { rows } = await db.query<{ id: string; balance: string; total: string | null; chain_breaks: string }>(
    `select a.id, a.balance_usd::text as balance, l.total::text as total, coalesce(l.breaks, 0)::text as chain_breaks
       from account a
       left join (
         select account_id, sum(amount_usd) as total,
                count(*) filter (where prev is not null and balance_after <> prev + amount_usd) as breaks
           from (select account_id, amount_usd, balance_after,
                        lag(balance_after) over (partition by account_id order by id) as prev
                   from ledger_entry) x
          group by account_id) l on l.account_id = a.id
      where a.balance_usd <> coalesce(l.total, 0) or coalesce(l.breaks, 0) > 0`,
  );
  const accounts = await db.query<{ n: string }>('select count(*)::text as n from account');
  return result(
    'money: ledger sums to balance',
    'safety',
    rows.map((r) => `account ${r.id}: balance ${r.balance}, ledger sum ${r.total ?? '0'}, ${r.chain_breaks} broken balance_after links`),
    Number(accounts.rows[0]!.n),
  );
}

/** Every purchase row names a tunnel of its account charged exactly that; every tunnel has exactly one purchase row. */
export async function chargesMatchTunnels(db: Queryable): Promise<CheckResult> {
  const orphan = await db.query<{ id: string; tunnel_id: string | null }>(
    `select l.id::text, l.tunnel_id from ledger_entry l
       left join tunnel t on t.id = l.tunnel_id and t.account_id = l.account_id
      where l.kind = 'purchase' and (t.id is null or -l.amount_usd <> t.charged_usd)`,
  );
  const counts = await db.query<{ id: string; n: string }>(
    `select t.id, count(l.id)::text as n from tunnel t
       left join ledger_entry l on l.tunnel_id = t.id and l.kind = 'purchase'
      group by t.id having count(l.id) <> 1`,
  );
  const tunnels = await db.query<{ n: string }>('select count(*)::text as n from tunnel');
  return result(
    'money: one charge per tunnel, none without one',
    'safety',
    [
      ...orphan.rows.map((r) => `ledger row ${r.id}: purchase of ${r.tunnel_id ?? 'no tunnel'} with no matching tunnel of its account and charge`),
      ...counts.rows.map((r) => `tunnel ${r.id}: charged ${r.n} times`),
    ],
    Number(tunnels.rows[0]!.n),
  );
}

/** Every purchase the API answered 201 (by tunnel id, as the client kept them) exists exactly once. */
export async function answeredPurchasesExist(db: Queryable, answered: ReadonlySet<string>): Promise<CheckResult> {
  const ids = [...answered];
  const { rows } = await db.query<{ id: string }>('select id::text as id from tunnel where id = any($1::uuid[])', [ids]);
  const have = new Set(rows.map((r) => r.id));
  return result(
    'money: every 201 purchase exists',
    'safety',
    ids.filter((id) => !have.has(id)).map((id) => `tunnel ${id} answered 201 but is not in the database`),
    ids.length,
  );
}

// --- protected IPs ---

/** Each protected IP is held by at most one live tunnel, and the pool's row says which (the same one). */
export async function protectedIpHeldOnce(db: Queryable): Promise<CheckResult> {
  const dup = await db.query<{ ip: string; n: string }>(
    `select protected_ip as ip, count(*)::text as n from tunnel where status <> 'deleted' group by protected_ip having count(*) > 1`,
  );
  const mismatch = await db.query<{ ip: string; held_by: string | null; live: string | null }>(
    `select p.ip, p.tunnel_id::text as held_by, t.id::text as live
       from protected_ip p
       full join (select id, protected_ip from tunnel where status <> 'deleted') t on t.protected_ip = p.ip
      where p.tunnel_id is distinct from t.id`,
  );
  const ips = await db.query<{ n: string }>('select count(*)::text as n from protected_ip');
  return result(
    'ips: each protected IP held by at most one live tunnel',
    'safety',
    [
      ...dup.rows.map((r) => `${r.ip}: ${r.n} live tunnels`),
      ...mismatch.rows.map((r) => `${r.ip ?? '?'}: pool row says ${r.held_by ?? 'free'}, live tunnel is ${r.live ?? 'none'}`),
    ],
    Number(ips.rows[0]!.n),
  );
}

/** A deleted tunnel's IP is back in the pool: free, or held by a later live tunnel (it was sold again). */
export async function freedIpsReturned(db: Queryable): Promise<CheckResult> {
  const { rows } = await db.query<{ ip: string; id: string }>(
    `select t.protected_ip as ip, t.id::text as id from tunnel t join protected_ip p on p.tunnel_id = t.id where t.status = 'deleted'`,
  );
  const deleted = await db.query<{ n: string }>(`select count(*)::text as n from tunnel where status = 'deleted'`);
  return result('ips: freed IPs back in the pool', 'safety', rows.map((r) => `${r.ip} still held by deleted tunnel ${r.id}`), Number(deleted.rows[0]!.n));
}

// --- edge state ---

interface TunnelState {
  id: string;
  tunnel_name: string;
  protected_ip: string;
  status: string;
  applied_revision: number;
  spec_revision: number;
}

/** Statuses whose tunnel is on the edge, and the ones where it is on its way on or off (not compared). */
const ON_EDGE = new Set(['provisioned', 'active']);
const MOVING = new Set(['provisioning', 'deleting']);

async function tunnelsOf(db: Queryable, nodeId: string): Promise<Map<string, TunnelState>> {
  const { rows } = await db.query<TunnelState & Record<string, unknown>>(
    'select id::text as id, tunnel_name, protected_ip, status, applied_revision, spec_revision from tunnel where node_id = $1',
    [nodeId],
  );
  return new Map(rows.map((r) => [r.id, r]));
}

const same = (a: TunnelState | undefined, b: TunnelState | undefined) =>
  !!a && !!b && a.status === b.status && a.applied_revision === b.applied_revision && a.spec_revision === b.spec_revision;

/**
 * Compares one edge's kernel with what the database wants there. The database is read before and after the
 * kernel: a tunnel whose row changed between the two reads, or that is on its way (provisioning, deleting, a
 * settings change not applied yet), is not compared; every other one must be exactly as its status says:
 * provisioned or active with its link and counter element (and DNAT element when active, none when not),
 * any other status with no link. A tunnel link the database does not know at all is a stray. The agent's
 * table must hold its rules (a flushed table has none).
 */
export function compareEdge(before: Map<string, TunnelState>, seen: EdgeObservation, after: Map<string, TunnelState>): { found: string[]; compared: number } {
  const found: string[] = [];
  const links = new Set(seen.links);
  const counters = new Set(seen.counterKeys);
  const dnat = new Set(seen.dnatKeys);
  if (seen.rules === 0) found.push('the agent table has no rules');
  let compared = 0;
  const heldBySettled = new Set<string>();
  for (const [id, b] of before) {
    const a = after.get(id);
    if (!same(b, a) || MOVING.has(b.status) || (ON_EDGE.has(b.status) && b.applied_revision < b.spec_revision)) continue;
    compared++;
    if (ON_EDGE.has(b.status)) {
      heldBySettled.add(b.protected_ip);
      if (!links.has(b.tunnel_name)) found.push(`${b.status} tunnel ${id}: link ${b.tunnel_name} missing`);
      if (!counters.has(b.protected_ip)) found.push(`${b.status} tunnel ${id}: counter element ${b.protected_ip} missing`);
      if (b.status === 'active' && !dnat.has(b.protected_ip)) found.push(`active tunnel ${id}: DNAT element ${b.protected_ip} missing`);
      if (b.status !== 'active' && dnat.has(b.protected_ip)) found.push(`${b.status} tunnel ${id}: DNAT element ${b.protected_ip} present`);
    } else if (links.has(b.tunnel_name)) {
      found.push(`${b.status} tunnel ${id}: link ${b.tunnel_name} still on the edge`);
    }
  }
  const known = new Set([...after.values()].map((t) => t.tunnel_name));
  for (const l of links) if (!known.has(l)) found.push(`link ${l} belongs to no tunnel`);
  return { found, compared };
}

/** Every edge that can be read holds exactly the tunnels its node's rows say (compareEdge). */
export async function edgesMatchDatabase(db: Queryable, edges: readonly SoakEdge[]): Promise<CheckResult> {
  const found: string[] = [];
  let compared = 0;
  for (const edge of edges) {
    const before = await tunnelsOf(db, edge.nodeId);
    const seen = edge.observe();
    if (!seen) continue;
    const after = await tunnelsOf(db, edge.nodeId);
    const c = compareEdge(before, seen, after);
    compared += c.compared;
    found.push(...c.found.map((f) => `${edge.label}: ${f}`));
  }
  return result('edges: kernel = database', 'liveness', found, compared);
}

// --- queue ---

/** Bound past a job's due time within which a worker must have taken it (its node's slot freed by then). */
export const QUEUE_PICKUP_SLACK_S = 120;

/**
 * No edge job runs twice at once: at most one live job per tunnel and per node reconcile, at most one
 * active job per node (the singleton slot), and no two jobs of one tunnel ever ran overlapping (one started
 * while the other was running and still completed).
 */
export async function queueNoDoubleRun(db: Queryable): Promise<CheckResult> {
  const live = await db.query<{ key: string; n: string }>(
    `select coalesce(data->>'tunnelId', 'reconcile ' || (data->>'nodeId')) as key, count(*)::text as n
       from pgboss.job where name = 'edge-job' and state < 'completed' group by 1 having count(*) > 1`,
  );
  const active = await db.query<{ node: string; n: string }>(
    `select data->>'nodeId' as node, count(*)::text as n from pgboss.job where name = 'edge-job' and state = 'active' group by 1 having count(*) > 1`,
  );
  const overlap = await db.query<{ tunnel: string; a: string; b: string }>(
    `select x.data->>'tunnelId' as tunnel, x.id::text as a, y.id::text as b
       from pgboss.job x join pgboss.job y
         on x.name = 'edge-job' and y.name = 'edge-job' and x.data->>'tunnelId' = y.data->>'tunnelId' and x.id < y.id
      where x.state = 'completed' and y.state = 'completed'
        and x.started_on < y.completed_on and y.started_on < x.completed_on`,
  );
  const jobs = await db.query<{ n: string }>(`select count(*)::text as n from pgboss.job where name = 'edge-job'`);
  return result(
    'queue: no job run twice',
    'safety',
    [
      ...live.rows.map((r) => `${r.key}: ${r.n} live jobs`),
      ...active.rows.map((r) => `node ${r.node}: ${r.n} active jobs`),
      ...overlap.rows.map((r) => `tunnel ${r.tunnel}: jobs ${r.a} and ${r.b} both completed, overlapping`),
    ],
    Number(jobs.rows[0]!.n),
  );
}

/**
 * Nothing stuck: every edge job that was due at `cutoff` and is still waiting has been due for less than
 * QUEUE_PICKUP_SLACK_S, and every active one is within its expiry (plus the monitor's pass) of its start.
 */
export async function queueNothingStuck(db: Queryable): Promise<CheckResult> {
  const { rows } = await db.query<{ id: string; state: string; key: string; late_s: string }>(
    `select id::text as id, state::text as state, coalesce(data->>'tunnelId', 'reconcile ' || (data->>'nodeId')) as key,
            round(extract(epoch from now() - case when state = 'active' then started_on + make_interval(secs => expire_seconds) else start_after end))::text as late_s
       from pgboss.job
      where name = 'edge-job' and state in ('created', 'retry', 'active')
        and now() - case when state = 'active' then started_on + make_interval(secs => expire_seconds) else start_after end > make_interval(secs => $1)`,
    [QUEUE_PICKUP_SLACK_S],
  );
  const jobs = await db.query<{ n: string }>(`select count(*)::text as n from pgboss.job where name = 'edge-job' and state < 'completed'`);
  return result('queue: nothing stuck', 'liveness', rows.map((r) => `job ${r.id} (${r.key}) ${r.state}, ${r.late_s} s past its due time`), Number(jobs.rows[0]!.n));
}

/** Tunnels still provisioning or deleting that have no live job to move them on (the sweeper's work). */
export async function movingTunnelsHaveJobs(db: Queryable, cutoff: Date): Promise<CheckResult> {
  const { rows } = await db.query<{ id: string; status: string }>(
    `select t.id::text as id, t.status::text as status from tunnel t
      where t.status in ('provisioning', 'deleting') and t.updated_at <= $1
        and not exists (select 1 from pgboss.job j where j.name = 'edge-job' and j.data->>'tunnelId' = t.id::text and j.state < 'completed')`,
    [cutoff],
  );
  return result('queue: moving tunnels have a job', 'liveness', rows.map((r) => `tunnel ${r.id} ${r.status} since before the cutoff with no live job`), rows.length);
}

// --- webhooks ---

/**
 * Every delivery the database wrote (one per event and endpoint) before `cutoff` reached its endpoint at
 * least once with a valid signature: `received(webhookId)` is the set of message ids the receiver verified.
 */
export async function webhooksDelivered(db: Queryable, received: (webhookId: string) => ReadonlySet<string>, cutoff: Date): Promise<CheckResult> {
  const { rows } = await db.query<{ id: string; webhook_id: string; event_type: string; given_up: boolean }>(
    `select id, webhook_id::text as webhook_id, event_type, given_up_at is not null as given_up from webhook_delivery where created_at <= $1`,
    [cutoff],
  );
  const found = rows.filter((r) => !received(r.webhook_id).has(r.id)).map((r) => `${r.event_type} ${r.id} to webhook ${r.webhook_id} not received${r.given_up ? ' (given up)' : ''}`);
  return result('webhooks: every event delivered', 'liveness', found, rows.length);
}

// --- all of them ---

export interface InvariantInputs {
  edges: readonly SoakEdge[];
  answered: ReadonlySet<string>;
  received: (webhookId: string) => ReadonlySet<string>;
}

/** The safety checks, in one repeatable-read snapshot (`snapshot` runs a function inside one). */
export async function safetyChecks(snapshot: <T>(fn: (db: Queryable) => Promise<T>) => Promise<T>, inputs: Pick<InvariantInputs, 'answered'>): Promise<CheckResult[]> {
  // Copied before the snapshot begins: every id in it was committed before, so the snapshot must see it.
  const answered = new Set(inputs.answered);
  return snapshot(async (db) => [
    await ledgerSumsToBalance(db),
    await chargesMatchTunnels(db),
    await answeredPurchasesExist(db, answered),
    await protectedIpHeldOnce(db),
    await freedIpsReturned(db),
    await queueNoDoubleRun(db),
  ]);
}

/** The liveness checks as of `cutoff`. */
export async function livenessChecks(db: Queryable, inputs: InvariantInputs, cutoff: Date): Promise<CheckResult[]> {
  return [
    await edgesMatchDatabase(db, inputs.edges),
    await queueNothingStuck(db),
    await movingTunnelsHaveJobs(db, cutoff),
    await webhooksDelivered(db, inputs.received, cutoff),
  ];
}
