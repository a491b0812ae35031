// What an admin CLI command is (Command) and what it runs with (CommandContext): the shapes every command list
// (commands.ts, read-commands.ts, queue-commands.ts, webhook-commands.ts) and the CLI's entry (admin.ts) share.
// Here, below the lists, so the lists import the shapes and commands.ts imports the lists, never the reverse.
import type { Database } from '../db/database.ts';
import type { SendOnceResult } from '../provisioning/queue.ts';
import type { ServerSecrets } from '../secrets.ts';
import type { OptionSpec, ParsedOptions } from './args.ts';
import type { Config } from '../config.ts';

/** What these commands need of provisioning (server/provisioning/service.ts). */
export interface EdgeQueueing {
  queueReconcile(nodeId: string, reason: 'operator'): Promise<SendOnceResult>;
  queueRepair(tunnelId: string): Promise<SendOnceResult>;
}

export interface CommandContext {
  db: Database;
  /** The environment's settings (ALLOW_PRIVATE_WEBHOOKS for `webhook create`). */
  config: Config;
  /** Loads (and on first use generates) the server secrets; only the commands that need them call it. */
  secrets(): Promise<ServerSecrets>;
  /** Progress for long work: goes to stderr, never stdout. */
  progress(line: string): void;
  /** The provisioning queue (opened on first use), for `node reconcile` and `tunnel repair`. */
  provisioning(): Promise<EdgeQueueing>;
}

export interface Command {
  /** The two command words, e.g. `user create`. */
  name: string;
  summary: string;
  /** Printed keys, for the help text. */
  prints: string;
  options: readonly OptionSpec[];
  /** A read command: changes nothing, and takes `--format table` besides JSON (server/cli/table.ts). */
  read?: true;
  /** Checks of the command line that need no database; a failure is a usage error (exit 2). */
  check?(o: ParsedOptions): void;
  run(ctx: CommandContext, o: ParsedOptions): Promise<Record<string, unknown>>;
}
