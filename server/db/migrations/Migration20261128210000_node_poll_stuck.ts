// The agent's stuck operation as the last status round found it (docs/CONTRACTS.md "Health and traffic"): op
// `status` reports `agent.stuck` ({op, step, since}) while its watchdog has given an operation up and it has not
// settled. Kept per node beside the round's outcome, null when none was reported (or the agent did not answer),
// so the node view (admin CLI `node list`/`node show`) shows an edge that is wedged rather than only unreachable.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261128210000_node_poll_stuck extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table traffic.node_poll add column stuck jsonb null;`);
  }
}
