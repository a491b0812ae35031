// The admin CLI's read commands (docs/CONTRACTS.md "Admin CLI", read commands): thin adapters over
// server/domain/admin-read.ts. Lists take --limit (1-1000, default 100) and --cursor (the previous
// page's opaque next_cursor) like `client list`; `show` prints one object. Secrets are never printed.
import { TUNNEL_STATUSES, type TunnelStatus } from '../db/entities.ts';
import { listApiKeys, listLedger, listPromocodes, listTunnels, listUsers, showUser, type PageRequest } from '../domain/admin-read.ts';
import { intOption, isoOption, type OptionSpec, type ParsedOptions } from './args.ts';
import type { Command } from './command.ts';

const opt = (o: ParsedOptions, name: string): string | undefined => o[name] as string | undefined;
const str = (o: ParsedOptions, name: string): string => o[name] as string;

const PAGE_OPTIONS: readonly OptionSpec[] = [
  { name: 'limit', value: 'N', help: 'at most this many (1-1000, default 100)' },
  { name: 'cursor', value: 'CURSOR', help: 'next_cursor of the previous page' },
];

function checkLimit(command: string, o: ParsedOptions): void {
  const limit = opt(o, 'limit');
  if (limit !== undefined) intOption(command, 'limit', limit, 1, 1000);
}

function pageOf(o: ParsedOptions): PageRequest {
  const limit = opt(o, 'limit');
  return { limit: limit === undefined ? 100 : Number(limit), cursor: opt(o, 'cursor') ?? null };
}

export const READ_COMMANDS: readonly Command[] = [
  {
    name: 'user list',
    read: true,
    summary: 'List users with their account balance, newest first (never their password hashes).',
    prints: '{items: [{id, account_id, email, name, role, picture, balance_usd, created_at}], next_cursor}',
    options: PAGE_OPTIONS,
    check: (o) => checkLimit('user list', o),
    run: ({ db }, o) => listUsers(db, pageOf(o)),
  },
  {
    name: 'user show',
    read: true,
    summary: "One user with their account balance, their account's tunnels by status and its live API keys.",
    prints: '{id, account_id, email, name, role, picture, balance_usd, created_at, tunnels, active_api_keys}',
    options: [{ name: 'email', value: 'EMAIL', help: 'the user (case-insensitive)', required: true }],
    run: ({ db }, o) => showUser(db, str(o, 'email')),
  },
  {
    name: 'tunnel list',
    read: true,
    summary: 'List tunnels of every account (deleted ones too), newest first, with their health and settings, optionally filtered.',
    prints:
      '{items: [{id, account_id, node_id, node_name, name, protected_ip, origin_ip, tunnel_name, status, health, health_checked_at, ports, protocol, protection, charged_usd, charged_rub, created_at, updated_at}], next_cursor}',
    options: [
      { name: 'email', value: 'EMAIL', help: "only this user's account" },
      { name: 'status', value: TUNNEL_STATUSES.join('|'), help: 'only tunnels in this status', choices: TUNNEL_STATUSES },
      { name: 'node', value: 'ID|NAME', help: 'only tunnels on this edge node (its id or name)' },
      ...PAGE_OPTIONS,
    ],
    check: (o) => checkLimit('tunnel list', o),
    run: ({ db }, o) =>
      listTunnels(db, { email: opt(o, 'email') ?? null, status: (opt(o, 'status') ?? null) as TunnelStatus | null, node: opt(o, 'node') ?? null }, pageOf(o)),
  },
  {
    name: 'ledger',
    read: true,
    summary: "A user's account ledger (top-ups and purchases), newest first.",
    prints: '{items: [{id, kind, amount_usd, balance_after, tunnel_id, promocode, created_at}], next_cursor}',
    options: [
      { name: 'email', value: 'EMAIL', help: 'the user whose account is shown', required: true },
      { name: 'since', value: 'ISO', help: 'only entries at or after this time, e.g. 2027-01-31 (midnight UTC) or 2027-01-31T12:00:00Z' },
      ...PAGE_OPTIONS,
    ],
    check(o) {
      checkLimit('ledger', o);
      const since = opt(o, 'since');
      if (since !== undefined) isoOption('ledger', 'since', since);
    },
    run({ db }, o) {
      const since = opt(o, 'since');
      return listLedger(db, str(o, 'email'), since === undefined ? null : isoOption('ledger', 'since', since), pageOf(o));
    },
  },
  {
    name: 'promocode list',
    read: true,
    summary: 'List promocodes with their discount, uses and expiry, newest first.',
    prints: '{items: [{code, percent, amount_rub, max_uses, uses, expires_at, created_at}], next_cursor}',
    options: PAGE_OPTIONS,
    check: (o) => checkLimit('promocode list', o),
    run: ({ db }, o) => listPromocodes(db, pageOf(o)),
  },
  {
    name: 'apikey list',
    read: true,
    summary: "List the API keys of a user's account (revoked ones too), newest first; never the keys or their hashes.",
    prints: '{items: [{id, user_id, permission, created_at, revoked_at, last_used_at}], next_cursor}',
    options: [{ name: 'email', value: 'EMAIL', help: "the user whose account's keys are listed", required: true }, ...PAGE_OPTIONS],
    check: (o) => checkLimit('apikey list', o),
    run: ({ db }, o) => listApiKeys(db, str(o, 'email'), pageOf(o)),
  },
];
