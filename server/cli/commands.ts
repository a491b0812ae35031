// The admin CLI's commands: docs/CONTRACTS.md "Admin CLI", one entry per row, each a thin adapter over the
// same domain functions the REST routes and GraphQL call.
import { createApiKey, revokeApiKey } from '../auth/api-keys.ts';
import { API_ACCESS, PERMISSIONS, ROLES, type ApiAccess, type Permission } from '../db/entities.ts';
import { addBalance, createUser, findUserByEmail } from '../domain/accounts.ts';
import { clientExists, createClient, listClients, MAX_REDIRECT_URIS, rotateClientSecret, setClientApiAccess, validateClientName, validateRedirectUris } from '../domain/clients.ts';
import { ApiError } from '../domain/errors.ts';
import { MoneyError, parseRate, rateToNumber } from '../domain/money.ts';
import { addNode, listNodes, showNode, updateNode } from '../domain/nodes.ts';
import { createPromocode } from '../domain/promocodes.ts';
import { setRate } from '../domain/settings.ts';
import { intOption, isoOption, UsageError, type ParsedOptions } from './args.ts';
import { QUEUE_COMMANDS } from './queue-commands.ts';
import { READ_COMMANDS } from './read-commands.ts';
import { FORMAT_OPTION } from './table.ts';
import { WEBHOOK_COMMANDS } from './webhook-commands.ts';
import type { Command } from './command.ts';

const str = (o: ParsedOptions, name: string): string => o[name] as string;
const opt = (o: ParsedOptions, name: string): string | undefined => o[name] as string | undefined;
const list = (o: ParsedOptions, name: string): string[] => (o[name] as string[] | undefined) ?? [];

const ALL_COMMANDS: readonly Command[] = [
  {
    name: 'user create',
    summary: 'Create a user with their own account (and optionally an opening balance).',
    prints: '{user_id, account_id}',
    options: [
      { name: 'email', value: 'EMAIL', help: 'login name, stored lower-cased', required: true },
      { name: 'name', value: 'NAME', help: 'display name', required: true },
      { name: 'password', value: 'PASSWORD|-', help: 'at least 8 characters; give - to read it from the first line of standard input (a value here is visible in ps and shell history, and draws a warning)', required: true, stdin: true },
      { name: 'balance-usd', value: 'USD', help: 'opening balance, a decimal such as 25.50 (default 0); written to the ledger' },
      { name: 'role', value: 'owner|viewer', help: 'owner may write, viewer only read (default owner)', choices: ROLES },
      { name: 'picture', value: 'URL', help: 'avatar, an absolute http(s) URL' },
    ],
    run: ({ db }, o) =>
      createUser(db, {
        email: str(o, 'email'),
        name: str(o, 'name'),
        password: str(o, 'password'),
        balanceUsd: opt(o, 'balance-usd') ?? null,
        role: opt(o, 'role') ?? null,
        picture: opt(o, 'picture') ?? null,
      }),
  },
  {
    name: 'balance add',
    summary: "Credit a user's account (a negative amount, written --usd=-5, debits it; the balance never goes below zero).",
    prints: '{balance}',
    options: [
      { name: 'email', value: 'EMAIL', help: "the user whose account is credited", required: true },
      { name: 'usd', value: 'USD', help: 'amount, a decimal with at most 2 places', required: true },
    ],
    run: ({ db }, o) => addBalance(db, str(o, 'email'), str(o, 'usd')),
  },
  {
    name: 'apikey create',
    summary: "Create an svc_ API key for a user's account. The key is shown once; only its hash is stored.",
    prints: '{id, key}',
    options: [
      { name: 'email', value: 'EMAIL', help: 'the user the key belongs to', required: true },
      { name: 'permission', value: 'read|write', help: 'write is needed to buy, provision and delete', required: true, choices: PERMISSIONS },
    ],
    async run({ db }, o) {
      const email = str(o, 'email');
      const user = await findUserByEmail(db, email);
      if (!user) throw new ApiError('not_found', `no user with email ${email}.`);
      return createApiKey(db, user.account_id, user.id, str(o, 'permission') as Permission);
    },
  },
  {
    name: 'apikey revoke',
    summary: 'Revoke an API key at once (revoking a revoked key again is not an error).',
    prints: '{id, revoked: true}',
    options: [{ name: 'id', value: 'ID', help: 'the key id printed by apikey create (a UUID)', required: true }],
    async run({ db }, o) {
      const id = str(o, 'id').toLowerCase();
      if (!(await revokeApiKey(db, id))) throw new ApiError('not_found', `no API key with id ${str(o, 'id')}.`);
      return { id, revoked: true };
    },
  },
  {
    name: 'client create',
    summary:
      'Register an OAuth client of the identity provider. The secret is shown once and stored encrypted. ' +
      'A --public client (a browser or native app) has no secret: it authenticates with PKCE alone and gets no ID token.',
    prints: '{client_id, client_secret, api_access, public}: client_secret is null for a public client',
    options: [
      { name: 'name', value: 'NAME', help: 'shown on the consent page', required: true },
      {
        name: 'redirect-uri',
        value: 'URI',
        help: `an absolute http(s) URL without a fragment, matched exactly; repeat for more (at most ${MAX_REDIRECT_URIS})`,
        required: true,
        multiple: true,
      },
      {
        name: 'api-access',
        value: 'none|read|write',
        help: "what the client's access tokens may do on the tunnel API and GraphQL, never more than the user's role (default none: sign-in only)",
        choices: API_ACCESS,
      },
      { name: 'public', value: '', help: 'a public client: token_endpoint_auth_method none, PKCE only, no secret, no ID token (openid refused)', flag: true },
    ],
    async run({ db, secrets }, o) {
      // Refuse bad input before the secrets are loaded (and, on a fresh database, generated).
      validateClientName(str(o, 'name'));
      validateRedirectUris(list(o, 'redirect-uri'));
      const { secretEncryptionKey } = await secrets();
      return createClient(db, secretEncryptionKey, {
        name: str(o, 'name'),
        redirectUris: list(o, 'redirect-uri'),
        apiAccess: (opt(o, 'api-access') ?? 'none') as ApiAccess,
        public: opt(o, 'public') === 'true',
      });
    },
  },
  {
    name: 'client update',
    summary: "Change what a client's access tokens may do on the tunnel API; applies at once to tokens already issued.",
    prints: '{client_id, api_access}',
    options: [
      { name: 'client-id', value: 'ID', help: 'the client id printed by client create', required: true },
      { name: 'api-access', value: 'none|read|write', help: 'the new API access', required: true, choices: API_ACCESS },
    ],
    run: ({ db }, o) => setClientApiAccess(db, str(o, 'client-id'), str(o, 'api-access')),
  },
  {
    name: 'client list',
    read: true,
    summary: 'List the OAuth clients with their redirect URIs and API access (never their secrets).',
    prints: '{items: [{client_id, name, redirect_uris, api_access, public, owner_account_id, created_at, secret_rotated_at}], next_cursor}',
    options: [
      { name: 'limit', value: 'N', help: 'at most this many (1-1000, default 100)' },
      { name: 'cursor', value: 'CURSOR', help: 'next_cursor of the previous page' },
    ],
    check(o) {
      const limit = opt(o, 'limit');
      if (limit !== undefined) intOption('client list', 'limit', limit, 1, 1000);
    },
    run: ({ db }, o) => {
      const limit = opt(o, 'limit');
      return listClients(db, { limit: limit === undefined ? 100 : Number(limit), cursor: opt(o, 'cursor') ?? null });
    },
  },
  {
    name: 'client rotate-secret',
    summary: "Replace a client's secret; the old one stops working at once.",
    prints: '{client_id, client_secret}',
    options: [{ name: 'client-id', value: 'ID', help: 'the client id printed by client create', required: true }],
    async run({ db, secrets }, o) {
      const clientId = str(o, 'client-id');
      if (!(await clientExists(db, clientId))) throw new ApiError('not_found', `no OAuth client ${JSON.stringify(clientId)}.`);
      const { secretEncryptionKey } = await secrets();
      return rotateClientSecret(db, secretEncryptionKey, str(o, 'client-id'));
    },
  },
  {
    name: 'node add',
    summary:
      "Add an edge router with its pool of protected IPs. The pool may not hold the node's own public or SSH " +
      "address, nor overlap another node's pool. The node sells only once its agent's host key is pinned " +
      '(--host-key here or node update). Prints what the operator installs on its agent: ' +
      'gateway_ssh_public_key is AGENT_AUTHORIZED_KEY (OpenSSH form), gateway_job_public_key is AGENT_JOB_KEY ' +
      '(an Ed25519 public JWK object; pass it as its JSON text).',
    prints: '{node_id, pool_size, gateway_ssh_public_key, gateway_job_public_key}',
    options: [
      { name: 'name', value: 'NAME', help: 'unique; letters, digits, ".", "_", "-"', required: true },
      { name: 'public-ip', value: 'IP', help: "the router's public IPv4 (the GRE underlay address on the edge)", required: true },
      { name: 'ssh-host', value: 'HOST', help: "where the gateway reaches the agent's SSH server", required: true },
      { name: 'ssh-port', value: 'PORT', help: "the agent's SSH port (default 52222)" },
      { name: 'pool', value: 'CIDR', help: 'protected IPs routed to this router, at most a /16', required: true },
      { name: 'host-key', value: 'FPR', help: "the agent's host-key fingerprint as it prints it (SHA256:...), pinned by the gateway" },
    ],
    check(o) {
      const port = opt(o, 'ssh-port');
      if (port !== undefined) intOption('node add', 'ssh-port', port, 1, 65535);
    },
    async run({ db, secrets, progress }, o) {
      // Secrets first: if they cannot be loaded, nothing is written.
      const { gatewaySshKey, jobSigningKey } = await secrets();
      const port = opt(o, 'ssh-port');
      const started = Date.now();
      progress(`adding node ${str(o, 'name')} with pool ${str(o, 'pool')}...`);
      const node = await addNode(db, {
        name: str(o, 'name'),
        publicIp: str(o, 'public-ip'),
        sshHost: str(o, 'ssh-host'),
        sshPort: port === undefined ? undefined : Number(port),
        pool: str(o, 'pool'),
        hostKey: opt(o, 'host-key') ?? null,
      });
      progress(`added ${node.pool_size} protected IPs in ${Date.now() - started} ms`);
      return {
        node_id: node.node_id,
        pool_size: node.pool_size,
        gateway_ssh_public_key: gatewaySshKey.publicKey,
        gateway_job_public_key: jobSigningKey.publicJwk,
      };
    },
  },
  {
    name: 'node update',
    summary:
      "Pin (or replace) a node's agent host key and/or start or stop its sales. Purchases take IPs only from " +
      'sellable nodes with a pinned host key; tunnels already sold on a node are not touched.',
    prints: '{node_id, sellable, host_key}',
    options: [
      { name: 'id', value: 'ID', help: 'the node id printed by node add', required: true },
      { name: 'host-key', value: 'FPR', help: "the agent's host-key fingerprint as it prints it (SHA256:...)" },
      { name: 'sellable', value: 'true|false', help: 'false stops new sales on this node', choices: ['true', 'false'] },
    ],
    check(o) {
      if (opt(o, 'host-key') === undefined && opt(o, 'sellable') === undefined) throw new UsageError('node update: give --host-key, --sellable or both.');
    },
    run: ({ db }, o) => {
      const sellable = opt(o, 'sellable');
      return updateNode(db, { id: str(o, 'id'), hostKey: opt(o, 'host-key'), sellable: sellable === undefined ? undefined : sellable === 'true' });
    },
  },
  {
    name: 'node list',
    read: true,
    summary:
      'Edge nodes, oldest first: addresses, pinned host key, whether they sell (sellable, a host key, and able to carry tunnels), ' +
      'whether the agent can make its tunnel links (can_carry_tunnels false: its kernel has no GRE, reason in tunnel_links; null: not reported yet), ' +
      'pool size and free IPs, tunnels by status, live tunnels by health, the last status round (when, and whether the agent answered), ' +
      'and the operation the agent reported stuck in that round (its watchdog gave it up and it has not settled).',
    prints:
      '{items: [{node_id, name, public_ip, ssh_host, ssh_port, host_key, sellable, selling, can_carry_tunnels, tunnel_links: {kind, usable, reason, since} | null, pool, pool_size, free, tunnels: {STATUS: n}, health: {up, down, unknown}, last_poll: {at, reachable} | null, stuck: {op, step, since} | null, created_at}], next_cursor}',
    options: [
      { name: 'limit', value: 'N', help: 'at most N nodes (1-500, default 50)' },
      { name: 'cursor', value: 'CURSOR', help: 'next_cursor of the previous page' },
    ],
    check(o) {
      const limit = opt(o, 'limit');
      if (limit !== undefined) intOption('node list', 'limit', limit, 1, 500);
    },
    run: ({ db }, o) => {
      const limit = opt(o, 'limit');
      return listNodes(db, { limit: limit === undefined ? undefined : Number(limit), cursor: opt(o, 'cursor') ?? null }).then((page) => ({ ...page }));
    },
  },
  {
    name: 'node show',
    read: true,
    summary: 'One edge node, as node list shows it.',
    prints: '{node_id, name, public_ip, ssh_host, ssh_port, host_key, sellable, selling, can_carry_tunnels, tunnel_links, pool, pool_size, free, tunnels, health, last_poll, stuck, created_at}',
    options: [{ name: 'id', value: 'ID', help: 'the node id printed by node add', required: true }],
    run: ({ db }, o) => showNode(db, str(o, 'id')).then((node) => ({ ...node })),
  },
  {
    name: 'rate set',
    summary: 'Set the USD/RUB rate used to price tunnels (RUB per USD, at most 4 decimals).',
    prints: '{usd_rub_rate}',
    options: [{ name: 'usd-rub', value: 'RATE', help: 'e.g. 92.5', required: true }],
    async run({ db }, o) {
      let rate: bigint;
      try {
        rate = parseRate(str(o, 'usd-rub'));
      } catch (e) {
        if (e instanceof MoneyError) throw new ApiError('invalid_request', e.message);
        throw e;
      }
      // Stored in one canonical spelling ("92.5", not " 092.50").
      const usdRubRate = rateToNumber(rate);
      await setRate(db, String(usdRubRate));
      return { usd_rub_rate: usdRubRate };
    },
  },
  {
    name: 'promocode create',
    summary: 'Create a promocode: a percentage or a fixed RUB amount off the price, optionally limited in uses and time.',
    prints: '{code}',
    options: [
      { name: 'code', value: 'CODE', help: 'letters, digits, "_", "-"; stored upper-case, matched case-insensitively', required: true },
      { name: 'percent', value: 'P', help: 'percent off, 1-100 (give this or --amount-rub)' },
      { name: 'amount-rub', value: 'A', help: 'RUB off, a decimal with at most 2 places (give this or --percent)' },
      { name: 'max-uses', value: 'N', help: 'how many purchases may use it (default unlimited)' },
      { name: 'expires', value: 'ISO', help: 'expiry, e.g. 2027-01-31 (midnight UTC) or 2027-01-31T12:00:00+03:00' },
    ],
    check(o) {
      const has = (n: string) => opt(o, n) !== undefined;
      if (has('percent') === has('amount-rub')) throw new UsageError('promocode create: give exactly one of --percent and --amount-rub.');
      if (has('percent')) intOption('promocode create', 'percent', str(o, 'percent'), 1, 100);
      if (has('max-uses')) intOption('promocode create', 'max-uses', str(o, 'max-uses'), 1, 2_147_483_647);
      if (has('expires')) isoOption('promocode create', 'expires', str(o, 'expires'));
    },
    async run({ db }, o) {
      const expires = opt(o, 'expires');
      const expiresAt = expires === undefined ? null : isoOption('promocode create', 'expires', expires);
      if (expiresAt && expiresAt.getTime() <= Date.now()) {
        throw new ApiError('invalid_request', `expires ${expires} is already in the past.`);
      }
      const percent = opt(o, 'percent');
      const maxUses = opt(o, 'max-uses');
      return createPromocode(db, {
        code: str(o, 'code'),
        percent: percent === undefined ? null : Number(percent),
        amountRub: opt(o, 'amount-rub') ?? null,
        maxUses: maxUses === undefined ? null : Number(maxUses),
        expiresAt,
      });
    },
  },
  ...READ_COMMANDS,
  ...QUEUE_COMMANDS,
  ...WEBHOOK_COMMANDS,
];

/** Every command; each read command with --format added here, once, rather than in every option list. */
export const COMMANDS: readonly Command[] = ALL_COMMANDS.map((c) => (c.read ? { ...c, options: [...c.options, FORMAT_OPTION] } : c));
