// The periodic reconcile runs on every replica (docs/CONTRACTS.md "Edge jobs"), yet each node gets one job per
// round between them: two gateways on one database, running their rounds at the same moment again and
// again, queue exactly one periodic reconcile per node. The rounds are called directly (the timer's only
// job is to call them), so nothing here depends on how fast the host is.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedNode } from '../helpers/fixtures.ts';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';

describe('periodic reconciles across replicas', () => {
  let a: RunningGateway;
  let b: RunningGateway;
  // A period far longer than the test: the timers never fire, and the jobs' start (spread over a fifth of the
  // period) lies in the future, so no job runs while the test counts them.
  const config = { edgeReconcileSeconds: 3600 };
  beforeAll(async () => {
    a = await startGateway({ config });
    b = await startGateway({ testDb: a.testDb, config });
  }, 60_000);
  afterAll(async () => {
    await b?.close();
    await a?.close();
  });

  it('two replicas running five rounds each at once queue one periodic reconcile per node', async () => {
    const nodes = await Promise.all([0, 1, 2].map((i) => seedNode(a.testDb.db, `198.18.${40 + i}.0/28`)));
    const both = async () => (await Promise.all([a.services.provisioning.reconcileRound(), b.services.provisioning.reconcileRound()])).reduce((x, y) => x + y, 0);
    // The first pair of rounds, at the same moment: one job per node between them (the queue's per-key lock).
    expect(await both()).toBe(nodes.length);
    // The jobs ran and finished (marked so here: no agent listens): a finished job no longer blocks a new one,
    // but a reconcile within half a period is fresh, so the next rounds of both replicas queue nothing.
    await a.testDb.raw.query(`update pgboss.job set state = 'completed', completed_on = now() where name = 'edge-job' and data->>'reason' = 'periodic'`);
    for (let round = 0; round < 4; round++) expect(await both()).toBe(0);
    const { rows } = await a.testDb.raw.query<{ node_id: string; n: number }>(
      `select data->>'nodeId' as node_id, count(*)::int as n from pgboss.job
        where name = 'edge-job' and data->>'kind' = 'reconcile' and data->>'reason' = 'periodic' group by 1 order by 1`,
    );
    expect(rows).toEqual(nodes.map((n) => ({ node_id: n.node_id, n: 1 })).sort((x, y) => x.node_id.localeCompare(y.node_id)));
  });
});
