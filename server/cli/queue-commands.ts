// The admin CLI's queue commands (docs/CONTRACTS.md "Admin CLI"): `node reconcile` and `tunnel repair` put edge work on
// the provisioning queue (pg-boss, server/provisioning/queue.ts) under the one-live-job rule of
// docs/CONTRACTS.md "Tunnel lifecycle", and print `{queued: true, job_id}`: the job now live for that node's reconcile or that tunnel
// (the one just queued, or the one already live, which does the same work). A gateway's worker runs it.
// On the embedded database the command runs inside the gateway (admin-socket.ts) on its own queue.
import { ApiError } from '../domain/errors.ts';
import { isUuid } from '../../common/names.ts';
import type { SendOnceResult } from '../provisioning/queue.ts';
import type { ParsedOptions } from './args.ts';
import type { Command } from './command.ts';

const str = (o: ParsedOptions, name: string): string => o[name] as string;

function queued(r: SendOnceResult): { queued: true; job_id: string } {
  // sendOnce names the live job either way; no id means pg-boss refused the insert, which the
  // singleton policy never does for a queued job: a bug, not a refusal.
  if (r.jobId === null) throw new Error('the queue accepted no job');
  return { queued: true, job_id: r.jobId };
}

export const QUEUE_COMMANDS: readonly Command[] = [
  {
    name: 'node reconcile',
    summary:
      "Queue a reconcile of an edge node: the gateway's worker sends the node its whole desired set of tunnels. " +
      'A node without a pinned host key is never contacted (node update --host-key).',
    prints: '{queued: true, job_id}',
    options: [{ name: 'id', value: 'ID', help: 'the node id printed by node add', required: true }],
    async run({ db, provisioning }, o) {
      const id = str(o, 'id').toLowerCase();
      const [node] = isUuid(id) ? await db.query<{ id: string }>('select id from edge_node where id = ?', [id]) : [];
      if (!node) throw new ApiError('not_found', `no edge node with id ${str(o, 'id')}.`);
      return queued(await (await provisioning()).queueReconcile(node.id, 'operator'));
    },
  },
  {
    name: 'tunnel repair',
    summary:
      'Queue the edge work a tunnel\'s status asks for: apply a provisioning, provisioned or active tunnel again, ' +
      'or finish removing a deleting one. Pending, failed and deleted tunnels are refused (invalid_state).',
    prints: '{queued: true, job_id}',
    options: [{ name: 'id', value: 'ID', help: 'the tunnel id', required: true }],
    run: async ({ provisioning }, o) => queued(await (await provisioning()).queueRepair(str(o, 'id'))),
  },
];
