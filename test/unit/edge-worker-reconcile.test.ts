// How the gateway's edge worker treats a reconcile that failed for some tunnels (one broken tunnel must not block its node). The
// agent that reports `failed: [{id, error, error_description}]` with ok:true is built on another branch,
// so the agent's answers here come from a stand-in for the SSH connection pool (named as such: a fake);
// the job signing is the real one. The end-to-end case with the real agent process is in
// test/integration/provisioning-reconcile.test.ts.
import { describe, expect, it } from 'vitest';
import type { Database } from '../../server/db/database.ts';
import type { EdgeConnections, EdgeNode, EdgeSession } from '../../server/edge/connections.ts';
import type { ResultLine } from '../../server/edge/job-signing.ts';
import { createLogger } from '../../common/log.ts';
import { parseSecret, generateSecret } from '../../server/secrets.ts';
import type { Transitions } from '../../server/provisioning/transitions.ts';
import { AgentRefused, EdgeWorker, reconcileFailures } from '../../server/provisioning/worker.ts';

const NODE: EdgeNode = { id: '6f1c1c52-8d0b-4d36-9a43-2f7f4f0c1a10', host: '127.0.0.1', port: 1, hostKeyFingerprint: 'SHA256:x' };
const BROKEN = '0d9f6a2e-31a4-4c5c-bb1e-7a4b8a4ce001';

/** A worker whose agent answers every job with `answer` (fake connection pool); logs captured. */
function workerAnswering(answer: (op: string) => ResultLine) {
  const sent: string[] = [];
  const logs: Record<string, unknown>[] = [];
  // One FAKE session (a v2 agent's hello) whose jobs get `answer`.
  const session: EdgeSession = {
    nodeId: NODE.id,
    hello: { versions: [1, 2], agent: '0.1.0', tunnelLinks: null },
    version: 2,
    stream: () => Promise.reject(new Error('this FAKE session opens no events stream')),
    run: async (jws: string) => {
      const op = JSON.parse(Buffer.from(jws.split('.')[1]!, 'base64url').toString('utf8')).op as string;
      sent.push(op);
      return answer(op);
    },
  };
  const connections = { session: async () => session } as unknown as EdgeConnections;
  // desiredSet() reads the node's tunnels: none needed for these cases.
  const db = { query: async () => [] } as unknown as Database;
  const worker = new EdgeWorker({
    db,
    connections,
    signingKey: parseSecret('job_signing_key', generateSecret('job_signing_key')),
    transitions: {} as Transitions,
    log: createLogger('debug', {}, (l) => logs.push(JSON.parse(l))),
    jobTimeoutMs: 1000,
  });
  return { worker, sent, logs };
}

const counts = { added: 0, changed: 0, removed: 0, unchanged: 3 };

describe('reconcileFailures', () => {
  it('reads the failed list, and none from agents that leave it out', () => {
    expect(reconcileFailures(counts)).toEqual([]);
    expect(reconcileFailures({ ...counts, failed: [{ id: BROKEN, error: 'kernel_error', error_description: 'link exists' }] })).toEqual([
      { id: BROKEN, error: 'kernel_error', error_description: 'link exists' },
    ]);
    expect(reconcileFailures({ ...counts, failed: [{ id: 7 }] })).toEqual([{ id: 'unknown', error: 'kernel_error', error_description: '' }]);
    expect(reconcileFailures({ ...counts, failed: 'nope' })).toEqual([]);
  });
});

describe('EdgeWorker.ensureReconciled', () => {
  it('a reconcile with failed tunnels counts as done: the failures are logged and the node is not reconciled again', async () => {
    const { worker, sent, logs } = workerAnswering((op) => ({
      ok: true,
      jti: '00000000-0000-4000-8000-000000000000',
      op: op as 'reconcile',
      result: { ...counts, failed: [{ id: BROKEN, error: 'kernel_error', error_description: 'link tg-x exists and was not created by this agent' }] } as never,
    }));
    await worker.ensureReconciled(NODE);
    await worker.ensureReconciled(NODE);
    expect(sent).toEqual(['reconcile']);
    const warn = logs.find((l) => l.msg === 'edge reconciled with failures');
    expect(warn).toMatchObject({ node_id: NODE.id, failed: 1, failures: [{ id: BROKEN, error: 'kernel_error' }] });
  });

  it('an older agent failing the whole reconcile in the kernel does not hold the node; other refusals still do', async () => {
    const kernel = workerAnswering(() => ({ ok: false, error: 'kernel_error', error_description: 'link tg-x exists and was not created by this agent' }));
    await kernel.worker.ensureReconciled(NODE);
    await kernel.worker.ensureReconciled(NODE);
    expect(kernel.sent).toEqual(['reconcile']);

    const refused = workerAnswering(() => ({ ok: false, error: 'invalid_signature', error_description: 'another key' }));
    await expect(refused.worker.ensureReconciled(NODE)).rejects.toBeInstanceOf(AgentRefused);
    await expect(refused.worker.ensureReconciled(NODE)).rejects.toBeInstanceOf(AgentRefused);
    expect(refused.sent).toEqual(['reconcile', 'reconcile']);
  });
});
