// What the queue and provisioning tests read and do besides the gateway under test: buying and provisioning a
// tunnel over REST, its status and pg-boss's own job rows for it (schema `pgboss`, queue `edge-job`;
// server/provisioning/queue.ts), read with a plain client so the assertion does not go through the code it checks.
import type pg from 'pg';
import { BOSS_SCHEMA, EDGE_QUEUE } from '../../server/provisioning/queue.ts';
import { call } from './gateway.ts';
import { settle } from './wait.ts';

export interface Bought {
  id: string;
  protected_ip: string;
  tunnel_name: string;
  status: string;
}

/** Buys a tunnel through the gateway at `url` (201 or it throws, naming the answer). */
export async function buyTunnel(url: string, token: string, name: string): Promise<Bought> {
  const r = await call(url, 'POST', '/api/dedicated', { token, body: { name, origin_ip: '8.8.4.4' } });
  if (r.status !== 201) throw new Error(`purchase answered ${r.status}: ${r.text}`);
  return r.body.tunnel as Bought;
}

/**
 * Provisions tunnel `id` and waits until it is provisioned, through either answer (docs/CONTRACTS.md "Tunnel
 * lifecycle": 200 once the agent answered, 202 while the job goes on); any other end throws.
 */
export async function provisionTunnel(url: string, raw: pg.Pool, token: string, id: string): Promise<void> {
  const answer = await call(url, 'POST', `/api/dedicated/${id}/provision`, { token });
  const final = await settle(answer, 'provisioned', () => tunnelStatus(raw, id));
  if (final !== 'provisioned') throw new Error(`provision of ${id} ended ${final}`);
}

export interface EdgeJobRow {
  id: string;
  state: string;
  retry_count: number;
  singleton_key: string | null;
  started: boolean;
}

/** Every pg-boss job ever queued for this tunnel (any state), oldest first. */
export async function edgeJobsFor(raw: pg.Pool, tunnelId: string): Promise<EdgeJobRow[]> {
  const { rows } = await raw.query<EdgeJobRow>(
    `select id::text, state::text, retry_count, singleton_key, started_on is not null as started
       from ${BOSS_SCHEMA}.job where name = $1 and data->>'tunnelId' = $2 order by created_on`,
    [EDGE_QUEUE, tunnelId],
  );
  return rows;
}

/** The tunnel's status, read from the database. */
export async function tunnelStatus(raw: pg.Pool, id: string): Promise<string | undefined> {
  return (await raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]?.status;
}
