// The admin CLI: `npm run admin -- <command> [options]` (docs/CONTRACTS.md "Admin CLI").
//
// Output contract
// - Success: exactly one JSON object on stdout (one line), exit status 0. A read command given
//   `--format table` prints the same result as aligned text for people instead (server/cli/table.ts);
//   failures stay JSON either way.
// - Failure: exactly one `{"error": code, "error_description": text}` object on stderr (one line),
//   nothing on stdout, and a non-zero exit status:
//     2  usage error (`usage_error`): no or unknown command, unknown option, a required option missing,
//        an option without its value, a single-valued option given twice, a value outside its fixed
//        syntax (a choice such as --role, a whole number such as --ssh-port, an ISO time), a stray
//        argument. Found before the database is opened.
//     1  refused (the domain's code, e.g. `invalid_request`, `not_found`): the line was well formed but
//        the operation was refused (bad email, unknown user, duplicate name, pool clash, past expiry,
//        ...). Nothing was written.
//     3  failure (`configuration_error` or `server_error`): bad environment, an unusable stored
//        secret, the database unreachable, or a bug. Safe to retry once fixed.
// - `--help` (or `-h`, or `help`) prints usage text on stdout and exits 0; after a command it prints
//   that command's usage.
// - Progress of long work (`node add` with a large pool) goes to stderr, and only when stderr is a
//   terminal, so a script reading stdout and stderr sees only the JSON.
// - A secret given as an argument (`--password P` instead of `--password -`) works, but a success then
//   also prints `warning: ...` on stderr: the value was visible to every user in `ps` and stays in the
//   shell history. Failures print only their JSON line, whose contract is one line.
//
// The database is the gateway's: the same DATABASE_URL (or the embedded one under DATA_DIR), migrated
// on open. Server secrets (needed by `client ...` and `node add`) follow the gateway's rules in
// server/secrets.ts: run the CLI with the same secret variables as the gateway, if it has any.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConstraintViolationException } from '@mikro-orm/core';
import { ConfigError, loadConfig } from '../config.ts';
import type { Database } from '../db/database.ts';
import { ApiError } from '../domain/errors.ts';
import { loadSecrets, SecretsError, type ServerSecrets } from '../secrets.ts';
import { openDatabase } from '../services.ts';
import { formatUsage, parseOptions, UsageError, type ParsedOptions } from './args.ts';
import { COMMANDS } from './commands.ts';
import type { Command, EdgeQueueing } from './command.ts';
import { renderTable } from './table.ts';
import { AdminSocketRefused, adminSocketPath, forwardToGateway } from './admin-socket.ts';
import { createLogger } from '../../common/log.ts';
import { ProvisioningService } from '../provisioning/service.ts';
import { VERSION } from '../version.ts';

const EXIT = { ok: 0, refused: 1, usage: 2, failed: 3 } as const;

export interface Io {
  stdout(text: string): void;
  stderr(text: string): void;
  /** Whether progress lines are wanted on stderr. */
  progress: boolean;
  /** The first line of standard input, for `--password -`; absent where there is none (the admin socket). */
  readLine?: () => Promise<string>;
}

const STDIN_LIMIT = 64 * 1024;

/** Reads standard input up to its first newline (or its end), without the line break. */
async function firstLineOfStdin(): Promise<string> {
  // Bytes first, decoded once: a chunk boundary may split a multi-byte character.
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of process.stdin) {
    const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk), 'utf8');
    chunks.push(b);
    size += b.length;
    if (b.includes(0x0a) || size > STDIN_LIMIT) break;
  }
  const all = Buffer.concat(chunks);
  const nl = all.indexOf(0x0a);
  if (nl === -1 ? all.length > STDIN_LIMIT : nl > STDIN_LIMIT) throw new UsageError('the first line of standard input is too long.');
  return all.subarray(0, nl === -1 ? all.length : nl).toString('utf8').replace(/\r$/, '');
}

const processIo: Io = {
  stdout: (t) => process.stdout.write(t),
  stderr: (t) => process.stderr.write(t),
  progress: process.stderr.isTTY === true,
  readLine: firstLineOfStdin,
};

/**
 * Replaces each `--name -` of a stdin option by the first line of standard input (docs/CONTRACTS.md "Admin CLI"), in the
 * parsed options and in the command line handed to a gateway (which has no terminal of the caller's;
 * the admin socket is private to the gateway's user, never argv of any process).
 */
async function readStdinOptions(command: Command, options: ParsedOptions, argv: readonly string[], io: Io): Promise<string[]> {
  const out = [...argv];
  for (const spec of command.options) {
    if (!spec.stdin || options[spec.name] !== '-') continue;
    if (!io.readLine) throw new UsageError(`${command.name}: --${spec.name} - needs standard input, which this invocation does not have.`);
    const value = await io.readLine();
    if (value === '') throw new UsageError(`${command.name}: --${spec.name} -: the first line of standard input is empty.`);
    options[spec.name] = value;
    for (let i = command.name.split(' ').length; i < out.length; i++) {
      if (out[i] === `--${spec.name}` && out[i + 1] === '-') out[i + 1] = value;
      else if (out[i] === `--${spec.name}=-`) out[i] = `--${spec.name}=${value}`;
    }
  }
  return out;
}

const GROUPS = [...new Set(COMMANDS.map((c) => c.name.split(' ')[0]!))];

function globalUsage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return [
    'Tunnelgate admin CLI: operates on the gateway database (same DATABASE_URL / DATA_DIR as the gateway).',
    '',
    `Tunnelgate ${VERSION}.`,
    'Usage: npm run admin -- <command> [options]      npm run admin -- <command> --help      npm run admin -- --version',
    '',
    'Commands:',
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}  prints ${c.prints}`),
    '',
    'Success: one JSON object on stdout, exit 0 (read commands: --format table prints it as a table for people).',
    'Failure: {"error", "error_description"} on stderr and',
    'exit 2 (usage error: the command line is wrong), 1 (refused: nothing was written) or 3 (failure:',
    'environment, database or a bug). Money amounts are given as decimal strings such as 25.50 and printed as JSON numbers.',
    '',
  ].join('\n');
}

function commandUsage(c: Command): string {
  return `${formatUsage(c.name, c.summary, c.options)}\nPrints: ${c.prints}\n`;
}

interface Failure {
  status: number;
  error: string;
  description: string;
}

function classify(e: unknown): Failure {
  if (e instanceof UsageError) return { status: EXIT.usage, error: 'usage_error', description: e.message };
  if (e instanceof ApiError) return { status: EXIT.refused, error: e.code, description: e.message };
  // A race another process won (e.g. the same email registered at the same moment): refused, nothing written.
  if (e instanceof ConstraintViolationException) {
    return { status: EXIT.refused, error: 'invalid_request', description: `refused by the database: ${firstLine(e.message)}` };
  }
  if (e instanceof ConfigError || e instanceof SecretsError || e instanceof AdminSocketRefused) return { status: EXIT.failed, error: 'configuration_error', description: e.message };
  return { status: EXIT.failed, error: 'server_error', description: firstLine(e instanceof Error ? e.message : String(e)) || 'unexpected failure' };
}

const firstLine = (s: string) => s.split('\n')[0]!.trim();

/** Runs one CLI invocation and returns its exit status. Writes only through `io`. */
/**
 * `deps`: what a running gateway lends the commands it serves over the admin socket: its database and
 * its provisioning (so `node reconcile` / `tunnel repair` queue through the gateway's own queue and
 * per-tunnel locks, which on the embedded database exist only in that process).
 */
export async function main(
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  io: Io = processIo,
  deps: { db?: Database; provisioning?: EdgeQueueing; forwarded?: boolean } = {},
): Promise<number> {
  const fail = (f: Failure) => {
    io.stderr(JSON.stringify({ error: f.error, error_description: f.description }) + '\n');
    return f.status;
  };
  const [first, second] = argv;
  if (first === undefined) return fail(classify(new UsageError('no command given; run with --help for the list.')));
  if (first === '--help' || first === '-h' || first === 'help') {
    io.stdout(globalUsage());
    return EXIT.ok;
  }
  if (first === '--version' || first === 'version') {
    // Like every command's answer (docs/CONTRACTS.md "Admin CLI"): one JSON object.
    io.stdout(JSON.stringify({ version: VERSION }) + '\n');
    return EXIT.ok;
  }
  // Most commands are two words (`user list`); a few are one (`ledger`, docs/CONTRACTS.md "Admin CLI").
  const command = COMMANDS.find((c) => c.name === first) ?? COMMANDS.find((c) => c.name === `${first} ${second}`);
  if (!command) {
    if (GROUPS.includes(first) && (second === '--help' || second === '-h')) {
      io.stdout(COMMANDS.filter((c) => c.name.startsWith(`${first} `)).map(commandUsage).join('\n'));
      return EXIT.ok;
    }
    const what = GROUPS.includes(first)
      ? `${first} takes one of: ${COMMANDS.filter((c) => c.name.startsWith(`${first} `)).map((c) => c.name.split(' ')[1]).join(', ')}; got ${second === undefined ? 'nothing' : JSON.stringify(second)}.`
      : `unknown command ${JSON.stringify(first)}; commands: ${COMMANDS.map((c) => c.name).join(', ')}.`;
    return fail(classify(new UsageError(what)));
  }

  let options;
  try {
    options = parseOptions(command.name, command.options, argv.slice(command.name.split(' ').length));
    if (options === null) {
      io.stdout(commandUsage(command));
      return EXIT.ok;
    }
    command.check?.(options);
  } catch (e) {
    return fail(classify(e));
  }

  // Secrets written on the command line, found before standard input fills in the `-` ones. A command
  // line forwarded by a CLI process (deps.forwarded) has its `-` values filled in already: that CLI warns.
  const parsed = options;
  const inArgv = deps.forwarded ? [] : command.options.filter((s) => s.stdin && parsed[s.name] !== undefined && parsed[s.name] !== '-').map((s) => s.name);
  const succeeded = (): number => {
    for (const name of inArgv) io.stderr(`warning: --${name} on the command line is visible in ps and shell history; use --${name} - and pipe it\n`);
    return EXIT.ok;
  };

  let forwarded: string[];
  try {
    forwarded = await readStdinOptions(command, options, argv, io);
  } catch (e) {
    return fail(classify(e));
  }

  let db: Database | undefined;
  // Opened only by the queue commands, and stopped before the process ends.
  let ownProvisioning: ProvisioningService | undefined;
  try {
    const config = loadConfig(env);
    if (!deps.db && !config.databaseUrl) {
      // A gateway running on the embedded database owns it: let that process run the command.
      const reply = await forwardToGateway(adminSocketPath(config.dataDir), forwarded);
      if (reply) {
        if (reply.stdout) io.stdout(reply.stdout);
        if (reply.stderr) io.stderr(reply.stderr);
        return reply.status === EXIT.ok ? succeeded() : reply.status;
      }
    }
    db = deps.db ?? (await openDatabase(config, { poolMax: 2 }));
    const opened = db;
    let secrets: Promise<ServerSecrets> | undefined;
    const result = await command.run(
      {
        db: opened,
        config,
        secrets: () => (secrets ??= loadSecrets(opened, env).then((l) => l.secrets)),
        progress: (line) => {
          if (io.progress) io.stderr(`${line}\n`);
        },
        provisioning: async () => deps.provisioning ?? (ownProvisioning ??= new ProvisioningService(opened, config, createLogger('silent'), () => {})),
      },
      options,
    );
    io.stdout(options.format === 'table' ? renderTable(result) : JSON.stringify(result) + '\n');
    return succeeded();
  } catch (e) {
    return fail(classify(e));
  } finally {
    await ownProvisioning?.stop().catch(() => {});
    if (!deps.db) await db?.close().catch(() => {});
  }
}

const entry = process.argv[1] ? path.resolve(process.argv[1]) : '';
if (entry === fileURLToPath(import.meta.url)) {
  process.exitCode = await main(process.argv.slice(2));
}
