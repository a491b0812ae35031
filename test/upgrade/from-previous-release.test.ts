// An upgrade from the previous release to this one, with the previous release's own code (docs/RELEASES.md
// "The upgrade test"): release/previous.json names its commit, which test/upgrade/previous-release.ts
// extracts from git history and runs on this checkout's dependencies (the same, but for the project's own
// version numbers: checked there).
//
//   1. The previous release, as its operator and buyers used it: its gateway (`server/main.ts` of its tree)
//      migrates a fresh database; its admin CLI makes the node, a buyer with a balance, API keys, a promocode
//      and an OAuth client; its agent (the previous tree's own agent code: its host key made by it, its
//      dataplane in a network namespace with the veth stand-in for GRE, through that tree's
//      test/helpers/agent-process.ts) carries the tunnels its REST API bought with various settings (one
//      provisioned and activated, with a TCP connection through it to an origin namespace from then on; one
//      provisioned; one pending, bought with the promocode and an Idempotency-Key; one provisioned and
//      deleted), a webhook, and an OAuth sign-in with a refresh token.
//   2. The database upgrade: that gateway stops and this release's starts on the same database. It applies
//      this release's migrations, and every REST answer is what it was, field by field, for the same
//      credentials (the svc_ keys, the OAuth access token); fields it adds must be named in CHANGELOG.md's
//      section for this release. The refresh token still refreshes, the idempotent purchase replays without
//      a charge, and the webhook's deliveries still verify with the secret the previous release gave.
//   3. The agent upgrade: this gateway drives the previous release's agent (a new tunnel, new settings on an
//      old one), then the agent is replaced by this release's (SIGTERM, a new process on the same state
//      directory and port, as `systemctl restart` does) while the connection carries data. With no agent
//      running the connection still flows; the new agent restores without adding, removing or failing
//      anything, every link is the same link (ifindex) and the DNAT map the same; after the gateway's
//      reconcile too, but for the DNAT of the tunnels never activated, which this release removes (it
//      forwards only to origins that answered the activate probe). The connection never closed, never reconnected, and every byte came back in order.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { migrationsList } from '../../server/db/migrations/index.ts';
import { runAdminCli } from '../helpers/admin-cli.ts';
import { TestEdge } from '../helpers/edge.ts';
import { call } from '../helpers/gateway.ts';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.ts';
import { exchange, signIn, token, type Client } from '../helpers/oidc-login.ts';
import { freePort } from '../helpers/ports.ts';
import { dropDatabase, withDatabase } from '../helpers/postgres.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';
import { verified, WebhookReceiver } from '../helpers/webhook-receiver.ts';
import { isRoot, TestNetns } from '../netns/netns.ts';
import { attachStandinOrigin, Proc, SERVER } from '../netns/origin-standin.ts';
import { changelogSection, compareAnswers, readChangelog, undocumentedAdditions, type AnswerDifferences } from './compare-answers.ts';
import { materialisePreviousRelease, readPreviousRecord, type PreviousRelease } from './previous-release.ts';
import { STREAM_CLIENT, type StreamFigures } from './stream-client.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const NODE = join(ROOT, 'node_modules/.bin/node');
const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const PREVIOUS = readPreviousRecord();
const POOL = '203.0.113.224/28';
const CLIENT = '198.51.100.10';
const CLIENT_GW = '198.51.100.1';
/**
 * The longest pause between two echoes the connection may show over the whole test, agent restart
 * included: a bound that turns an outage TCP would ride out into a failure, far above a loaded host's
 * scheduling stalls. The proof that the restart costs no packet is structural (the connection flows with
 * no agent at all; the new agent changes nothing), not this figure.
 */
const GAP_BOUND_MS = 15_000;
/**
 * Each step's bound (a hang becomes a failure; nothing is expected to take this long): a step starts a
 * gateway, which alone took over 90 s once on a loaded host (test/helpers/gateway-process.ts), beside CLI
 * processes and agents.
 */
const START_BOUND_MS = 300_000;

/** A tunnel as REST shows it (the fields this test reads). */
interface Tunnel {
  id: string;
  name: string | null;
  protected_ip: string;
  tunnel_name: string;
  status: string;
  ports: string;
}

/** One answer of the REST API, as compared before and after the upgrade. */
interface Answer {
  status: number;
  body: unknown;
}

/** The values the origin script is filled in with (its `readonly NAME='value'` lines): what the buyer's origin runs on. */
function scriptValues(script: string): Record<string, string> {
  return Object.fromEntries([...script.matchAll(/^readonly ([A-Z_]+)='([^'\n]*)'$/gm)].map((m) => [m[1]!, m[2]!]));
}

const execFileP = promisify(execFile);

/** The agent's host key made in `stateDir` by the agent code of the tree at `root` (what its `tunnel-agent fingerprint` calls). */
function hostKeyBy(root: string): (stateDir: string) => Promise<string> {
  return async (stateDir) => {
    const script = 'const { loadOrCreateHostKey } = await import(process.env.TG_KEYS_MODULE); process.stdout.write((await loadOrCreateHostKey(process.env.TG_STATE_DIR)).fingerprint);';
    const { stdout } = await execFileP(NODE, ['--import', join(root, 'loader/register.mjs'), '--input-type=module', '-e', script], {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', TG_KEYS_MODULE: pathToFileURL(join(root, 'agent/ssh/keys.ts')).href, TG_STATE_DIR: stateDir },
    });
    return stdout.trim();
  };
}

describe.skipIf(skipUnless(isRoot, 'the upgrade test: root (network namespaces)'))(`an upgrade from ${PREVIOUS.version} to ${VERSION}, with ${PREVIOUS.version}'s own code`, () => {
  const adminUrl = inject('adminDatabaseUrl');
  const dbName = `tg_upgrade_${randomBytes(4).toString('hex')}`;
  const dbUrl = withDatabase(adminUrl, dbName);
  let raw: pg.Pool;
  let prev: PreviousRelease;
  let port: number;
  let url: string;
  let env: Record<string, string>;
  const gateways: GatewayProcess[] = [];
  let edge: TestEdge;
  let receiver: WebhookReceiver;
  const origin = isRoot ? new TestNetns() : undefined;
  const client = isRoot ? new TestNetns() : undefined;
  const procs: Proc[] = [];
  let stream: Proc;

  // What the previous release made, and what the comparisons need of it.
  const buyer = { email: `buyer-${randomBytes(3).toString('hex')}@example.test`, name: 'Upgrade Buyer', password: `pw ${randomBytes(9).toString('base64url')}` };
  const promocode = `UPGRADE${randomBytes(3).toString('hex').toUpperCase()}`;
  let writeKey: string;
  let readKey: string;
  let oauth: Client;
  let accessToken: string;
  let refreshToken: string;
  let webhookSecret: string;
  /** The tunnels by role: web (active, carries the connection), game (provisioned), later (pending), gone (deleted); new (bought after the upgrade). */
  const t: Record<'web' | 'game' | 'later' | 'gone' | 'new', Tunnel> = {} as never;
  let replay: { key: string; body: Record<string, unknown>; first: Answer };
  let before: Record<string, Answer>;
  let migrationsBefore: string[];

  const admin = async (args: string[], opts: { root?: string; stdin?: string } = {}): Promise<Record<string, unknown>> => {
    const r = await runAdminCli({ DATABASE_URL: dbUrl }, args, opts.stdin, opts.root ? { root: opts.root } : {});
    if (r.code !== 0) throw new Error(`admin ${args.slice(0, 2).join(' ')} (${opts.root ? PREVIOUS.version : VERSION}) exited ${r.code}: ${r.stderr}`);
    return r.json;
  };
  const api = (method: string, path: string, opts: Parameters<typeof call>[3] = {}) => call(url, method, path, { token: writeKey, ...opts });
  const statusOf = async (id: string) => ((await api('GET', `/api/dedicated/${id}`)).body as { tunnel: Tunnel }).tunnel.status;
  const buy = async (body: Record<string, unknown>): Promise<Tunnel> => {
    const r = await api('POST', '/api/dedicated', { body });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return (r.body as { tunnel: Tunnel }).tunnel;
  };
  const provision = async (x: Tunnel): Promise<void> => {
    const r = await api('POST', `/api/dedicated/${x.id}/provision`);
    expect(await settle(r, 'provisioned', () => statusOf(x.id))).toBe('provisioned');
  };
  /** The agent versions this release's gateway met, in order: each `hello` it logged (one per new SSH connection). */
  const agentHellos = (): string[] =>
    gateways[1]!.lines.flatMap((line) => {
      try {
        const l = JSON.parse(line) as { msg?: string; agent?: string };
        return l.msg === 'edge agent hello' ? [String(l.agent)] : [];
      } catch {
        return [];
      }
    });
  const migrationsApplied = async () => (await raw.query<{ name: string }>('select name from mikro_orm_migrations order by id')).rows.map((r) => r.name);
  /** The agent's tunnel links by name, with their ifindex: the same number after a restart is the same link, not a new one. */
  const linkIndexes = () =>
    Object.fromEntries(
      edge.netns
        .ipJson<{ ifname: string; ifindex: number }[]>('link', 'show')
        .filter((l) => edge.links().includes(l.ifname))
        .map((l) => [l.ifname, l.ifindex]),
    );
  const streamLine = async (cmd: 'status' | 'stop', key: 'status' | 'done'): Promise<StreamFigures> => {
    const from = stream.lines.length;
    stream.send(cmd);
    const line = await until(`the connection's ${key}`, () => stream.lines.slice(from).find((l) => l.startsWith(`{"${key}"`)), 60_000);
    return (JSON.parse(line) as Record<string, StreamFigures>)[key]!;
  };
  /** Waits until `n` more lines have come back over the connection than when it was called; answers the figures then. */
  const flows = async (n: number, what: string): Promise<StreamFigures> => {
    const from = (await streamLine('status', 'status')).echoed;
    return until(`${n} more lines echoed over the connection ${what}`, async () => {
      const s = await streamLine('status', 'status');
      return s.echoed >= from + n ? s : null;
    }, 60_000);
  };

  /** Every REST answer compared across the upgrade, read with the previous release's credentials. */
  const snapshot = async (): Promise<Record<string, Answer>> => {
    const out: Record<string, Answer> = {};
    const get = async (label: string, path: string, bearer = writeKey) => {
      const r = await call(url, 'GET', path, { token: bearer });
      out[label] = { status: r.status, body: r.body };
      return r;
    };
    await get('tunnels', '/api/dedicated');
    await get('tunnels with the read key', '/api/dedicated', readKey);
    await get('tunnels with the OAuth access token', '/api/dedicated', accessToken);
    for (const role of ['web', 'game', 'later', 'gone'] as const) await get(`tunnel ${role}`, `/api/dedicated/${t[role].id}`);
    for (const role of ['web', 'game', 'later'] as const) {
      const r = await call(url, 'GET', `/api/dedicated/${t[role].id}/setup`, { token: readKey });
      const body = r.body as { tunnel_id: string; scripts: { origin: string } };
      out[`origin script values of ${role}`] = { status: r.status, body: { tunnel_id: body.tunnel_id, values: scriptValues(body.scripts.origin) } };
    }
    await get('health changes of web', `/api/dedicated/${t.web.id}/health-changes`);
    await get('webhooks', '/api/webhooks');
    await get('ledger', '/api/ledger');
    await get('pricing', '/api/dedicated/pricing');
    return out;
  };

  beforeAll(async () => {
    prev = materialisePreviousRelease();
    const a = new pg.Client({ connectionString: adminUrl });
    await a.connect();
    await a.query(`create database ${dbName}`);
    await a.end();
    raw = new pg.Pool({ connectionString: dbUrl, max: 2 });
    raw.on('error', () => {});
    port = await freePort();
    url = `http://127.0.0.1:${port}`;
    env = {
      DATABASE_URL: dbUrl,
      PORT: String(port),
      PUBLIC_URL: url,
      EDGE_WORKER: 'true',
      ALLOW_PRIVATE_WEBHOOKS: 'true',
      // The agent is local: provision and delete answer with the final status whenever it answers at all.
      EDGE_WAIT_MS: '60000',
      EDGE_JOB_TIMEOUT_MS: '30000',
      EDGE_RETRY_LIMIT: '20',
      // No status rounds during the test: the agents run without health checks (test/helpers/edge.ts).
      EDGE_STATUS_SECONDS: '3600',
    };
    receiver = await WebhookReceiver.start();
  }, 60_000);

  afterAll(async () => {
    for (const p of procs) p.stop();
    for (const g of gateways) g.kill('SIGKILL');
    await Promise.all(gateways.map((g) => g.exited));
    await edge?.close();
    origin?.delete();
    client?.delete();
    await receiver?.close();
    await raw?.end();
    const a = new pg.Client({ connectionString: adminUrl });
    await a.connect();
    await dropDatabase(a, dbName);
    await a.end();
    prev?.remove();
  });

  it(`${PREVIOUS.version}: its gateway migrates a fresh database, its CLI, REST and agent make tunnels, keys, a webhook and an OAuth grant`, async () => {
    const old = await startGatewayProcess(env, { root: prev.root });
    gateways.push(old);
    // It is the previous release answering, not this one.
    const health = (await call(url, 'GET', '/healthz')).body as { status: string; version?: string };
    expect(health.status).toBe('ok');
    expect(health.version).not.toBe(VERSION);
    await until(`${PREVIOUS.version} ready (migrated)`, async () => (await fetch(`${url}/readyz`)).status === 200);
    migrationsBefore = await migrationsApplied();

    const oldCli = { root: prev.root };
    // Three lanes of its CLI (each process loads the whole gateway), the node's lane then starting its agent.
    let clientCreated: Record<string, unknown> = {};
    await Promise.all([
      (async () => {
        edge = await TestEdge.register(async (n) => {
          const r = await admin(['node', 'add', '--name', n.name, '--public-ip', n.publicIp, '--ssh-host', n.sshHost, '--ssh-port', String(n.sshPort), '--pool', POOL, '--host-key', n.hostKey], oldCli);
          return { nodeId: String(r.node_id), authorizedKey: String(r.gateway_ssh_public_key), jobKey: JSON.stringify(r.gateway_job_public_key) };
        }, { makeHostKey: hostKeyBy(prev.root) });
        await edge.start({ root: prev.root });
      })(),
      (async () => {
        await admin(['user', 'create', '--email', buyer.email, '--name', buyer.name, '--password', '-', '--balance-usd', '50'], { ...oldCli, stdin: `${buyer.password}\n` });
        writeKey = String((await admin(['apikey', 'create', '--email', buyer.email, '--permission', 'write'], oldCli)).key);
        readKey = String((await admin(['apikey', 'create', '--email', buyer.email, '--permission', 'read'], oldCli)).key);
      })(),
      (async () => {
        await admin(['promocode', 'create', '--code', promocode, '--percent', '10'], oldCli);
        clientCreated = await admin(['client', 'create', '--name', 'Upgrade App', '--redirect-uri', 'http://127.0.0.1:9/cb', '--api-access', 'write'], oldCli);
      })(),
    ]);
    expect(writeKey).toMatch(/^svc_/);
    expect(readKey).toMatch(/^svc_/);
    oauth = { id: String(clientCreated.client_id), secret: String(clientCreated.client_secret), redirectUri: 'http://127.0.0.1:9/cb' };

    const hook = await api('POST', '/api/webhooks', { body: { url: receiver.url('/hook') } });
    expect(hook.status, JSON.stringify(hook.body)).toBe(201);
    webhookSecret = (hook.body as { secret: string }).secret;

    t.web = await buy({ name: 'web', origin_ip: '8.8.4.4', ports: '8080', protocol: 'tcp', protection: { source_pps_limit: 1000, drop_fragments: true } });
    t.game = await buy({ name: 'game', origin_ip: '8.8.8.8', ports: '27015,25565-25575', protocol: 'udp', protection: { source_pps_limit: 500 } });
    const laterBody = { name: 'later', origin_ip: '1.1.1.1', protocol: 'both', protection: { syn_proxy: true }, promocode };
    const key = `upgrade-${randomBytes(4).toString('hex')}`;
    const first = await api('POST', '/api/dedicated', { body: laterBody, headers: { 'idempotency-key': key } });
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    replay = { key, body: laterBody, first: { status: first.status, body: first.body } };
    t.later = (first.body as { tunnel: Tunnel }).tunnel;
    t.gone = await buy({ name: 'gone', origin_ip: '9.9.9.9' });
    for (const role of ['web', 'game', 'gone'] as const) await provision(t[role]);
    const deleted = await api('DELETE', `/api/dedicated/${t.gone.id}`);
    expect(await settle(deleted, 'deleted', () => statusOf(t.gone.id))).toBe('deleted');

    // The web tunnel's origin: the stand-in link's far end in the origin namespace, with the inner address
    // its setup script names, and a TCP echo service behind it. Then the buyer activates.
    const setup = (await api('GET', `/api/dedicated/${t.web.id}/setup`)).body as { scripts: { origin: string } };
    const values = scriptValues(setup.scripts.origin);
    origin!.run('ip', 'link', 'set', 'lo', 'up');
    attachStandinOrigin(edge.netns, origin!, { tunnel_name: t.web.tunnel_name, origin_inner: values.ORIGIN_INNER! });
    await edge.netns.waitForPing(values.ORIGIN_INNER_IP!);
    const server = new Proc(origin!, SERVER);
    procs.push(server);
    await server.saw((l) => l === 'ready');
    const activated = await until('activate answered 200', async () => {
      const r = await api('POST', `/api/dedicated/${t.web.id}/activate`);
      return r.status === 200 ? r : null;
    });
    expect((activated.body as { tunnel: Tunnel }).tunnel.status).toBe('active');

    // The client upstream of the edge, and its one connection through the protected IP, kept to the end.
    client!.run('ip', 'link', 'set', 'lo', 'up');
    edge.netns.run('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', client!.name);
    edge.netns.run('ip', 'addr', 'add', `${CLIENT_GW}/24`, 'dev', 'up0');
    edge.netns.run('ip', 'link', 'set', 'up0', 'up');
    edge.netns.run('ip', 'route', 'add', 'default', 'via', CLIENT);
    client!.run('ip', 'addr', 'add', `${CLIENT}/24`, 'dev', 'c0');
    client!.run('ip', 'link', 'set', 'c0', 'up');
    client!.run('ip', 'route', 'add', 'default', 'via', CLIENT_GW);
    await client!.waitForPing(CLIENT_GW);
    stream = new Proc(client!, STREAM_CLIENT, [t.web.protected_ip, '8080', CLIENT]);
    procs.push(stream);
    await stream.saw((l) => l.startsWith('{"open"'));
    await flows(50, `through ${PREVIOUS.version}'s agent`);

    // The OAuth client's grant: the buyer signs in and consents; an access and a refresh token.
    const signedIn = await signIn(url, oauth, buyer);
    const tokens = await exchange(url, oauth, signedIn.code, signedIn.verifier);
    expect(tokens.status, JSON.stringify(tokens.body)).toBe(200);
    accessToken = tokens.body.access_token!;
    refreshToken = tokens.body.refresh_token!;
    expect(refreshToken).toBeTruthy();

    // What the previous release's agent holds: links of the tunnels on the edge, the active one mapped.
    expect(edge.links().sort()).toEqual([t.web.tunnel_name, t.game.tunnel_name].sort());
    expect(edge.mapElements()).toContain(t.web.protected_ip);
    before = await snapshot();
    for (const [label, a] of Object.entries(before)) expect(a.status, `${label}: ${JSON.stringify(a.body)}`).toBe(200);
    // Its webhook deliveries so far, signed with the secret it gave.
    await until('deliveries of the previous release', () => receiver.to('/hook').length > 0);
    for (const d of receiver.to('/hook')) expect(verified(webhookSecret, d).type).toMatch(/^tunnel\./);
  }, START_BOUND_MS);

  it(`the database upgrade: ${VERSION}'s gateway migrates it and answers as ${PREVIOUS.version} did, for the same credentials`, async () => {
    const old = gateways[0]!;
    old.kill('SIGTERM');
    expect(await old.exited).toBe(0);
    const gw = await startGatewayProcess(env);
    gateways.push(gw);
    expect(((await call(url, 'GET', '/healthz')).body as { version: string }).version).toBe(VERSION);
    await until(`${VERSION} ready (migrated)`, async () => (await fetch(`${url}/readyz`)).status === 200);
    // Every migration of this release applied, after those of the previous one.
    const applied = await migrationsApplied();
    expect(applied).toEqual(migrationsList.map((m) => m.name));
    expect(applied.slice(0, migrationsBefore.length)).toEqual(migrationsBefore);

    const after = await snapshot();
    const out: AnswerDifferences = { changed: [], added: [] };
    for (const label of Object.keys(before)) compareAnswers(before[label], after[label], label, out);
    expect(out.changed).toEqual([]);
    // A field this release adds to an answer is documented: CHANGELOG.md's section for it names it.
    expect(undocumentedAdditions(out.added, changelogSection(readChangelog(join(ROOT, 'CHANGELOG.md')), VERSION))).toEqual([]);

    // The OAuth grant carries on: the refresh token of the previous release refreshes, and the new access
    // token reads what the old one did.
    const refreshed = await token(url, oauth, { grant_type: 'refresh_token', refresh_token: refreshToken });
    expect(refreshed.status, JSON.stringify(refreshed.body)).toBe(200);
    const list = await call(url, 'GET', '/api/dedicated', { token: refreshed.body.access_token });
    expect({ status: list.status, body: list.body }).toEqual(after['tunnels']);

    // The purchase replayed with its Idempotency-Key: the first answer again, and no second charge.
    const again = await api('POST', '/api/dedicated', { body: replay.body, headers: { 'idempotency-key': replay.key } });
    expect(compareAnswers(replay.first, { status: again.status, body: again.body }, 'replayed purchase').changed).toEqual([]);
    expect((await api('GET', '/api/ledger')).body).toEqual(after['ledger']!.body);
  }, START_BOUND_MS);

  it(`the agent upgrade: ${VERSION}'s gateway drives ${PREVIOUS.version}'s agent, which is then replaced under a live connection`, async () => {
    // A new tunnel and new settings on an old one, through the previous release's agent.
    const hooksBefore = receiver.to('/hook').length;
    t.new = await buy({ name: 'new', origin_ip: '8.26.56.26', ports: '443', protocol: 'tcp', protection: { syn_proxy: true } });
    await provision(t.new);
    const patched = await api('PATCH', `/api/dedicated/${t.game.id}`, { body: { ports: '25565-25575,27015,28000' } });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    expect((patched.body as { tunnel: Tunnel }).tunnel.ports).toBe('25565-25575,27015,28000');
    // Both reached the previous release's agent (its call lines come on another pipe than the gateway's answers).
    for (const id of [t.new.id, t.game.id]) await edge.waitForCall((c) => c.run === 1 && c.call === 'apply' && c.ids.includes(id));
    // The agent it drove is the previous release (its `hello` names its version), and it holds the new port.
    await until(`the gateway's hello to ${PREVIOUS.version}'s agent`, () => agentHellos().length > 0);
    expect(new Set(agentHellos())).toEqual(new Set([PREVIOUS.version]));
    expect(edge.netns.run('nft', 'list', 'table', 'ip', 'tunnelgate')).toContain(`${t.game.protected_ip} . udp . 28000`);
    const onEdge = [t.web, t.game, t.new].map((x) => x.tunnel_name).sort();
    expect(edge.links().sort()).toEqual(onEdge);
    // This release's deliveries still verify with the secret the previous release gave.
    const delivered = await until('a delivery about the new tunnel', () =>
      receiver.to('/hook').slice(hooksBefore).find((d) => verified(webhookSecret, d).data.tunnel.id === t.new.id),
    );
    expect(verified(webhookSecret, delivered).type).toBe('tunnel.status_changed');

    // The dataplane as the previous release's agent left it.
    const links = linkIndexes();
    const mapped = edge.mapElements().sort();
    expect(Object.keys(links).sort()).toEqual(onEdge);
    expect(mapped).toContain(t.web.protected_ip);
    await flows(50, 'before the restart');

    // `systemctl restart`: SIGTERM, and while no agent runs the connection still flows (the kernel holds the dataplane).
    await edge.kill('SIGTERM');
    await flows(50, 'with no agent running');
    // Held `after` (released at once): each call is reported once the kernel has it, so the reconcile below
    // is seen done, not just begun.
    await edge.start({ log: true, hold: 'after' });
    const restored = edge.logs.find((l) => l.run === 2 && l.msg === 'restored the last desired state');
    expect(restored, 'the new agent logs its restore').toBeDefined();
    expect({ added: restored!.added, removed: restored!.removed, failed: restored!.failed }).toEqual({ added: 0, removed: 0, failed: 0 });
    expect(Number(restored!.unchanged) + Number(restored!.changed)).toBe(onEdge.length);
    expect(linkIndexes()).toEqual(links);
    // The restore keeps every element. The gateway may already have sent its first reconcile to the new
    // agent (it can on the new connection at once), which holds back the DNAT of tunnels nobody activated:
    // calls are reported once the kernel has them, so a map read before any call of this run is the restore's.
    const restoredMap = edge.mapElements().sort();
    if (edge.calls.some((c) => c.run === 2)) expect([mapped, [t.web.protected_ip]]).toContainEqual(restoredMap);
    else expect(restoredMap).toEqual(mapped);
    await flows(50, `through ${VERSION}'s agent`);

    // The gateway's reconcile of the node, now on this release's agent: every tunnel kept, nothing recreated.
    const from = edge.calls.length;
    await admin(['node', 'reconcile', '--id', edge.nodeId]);
    const reconciled = await edge.waitForCall((c) => c.call === 'reconcile' && c.run === 2, from);
    expect([...reconciled.ids].sort()).toEqual([t.web.id, t.game.id, t.new.id].sort());
    // Over a new connection, to this release's agent (its hello line reaches this process on another pipe than the call's).
    expect(await until(`a hello from ${VERSION}'s agent`, () => agentHellos().at(-1) === VERSION)).toBe(true);
    expect(linkIndexes()).toEqual(links);
    // This release forwards only to an origin that answered the activate probe (job version 3 `forwarding`):
    // on its first reconcile the tunnels nobody activated lose their DNAT, the active one keeps its element
    // untouched, and the live connection through it flows on (checked below).
    expect(edge.mapElements().sort()).toEqual([t.web.protected_ip]);
    expect(mapped).toEqual([t.web.protected_ip, t.game.protected_ip, t.new.protected_ip].sort());
    for (const x of [t.web, t.game, t.new]) expect(await statusOf(x.id)).toBe(x === t.web ? 'active' : 'provisioned');

    // The connection: one socket from before the database upgrade to now, every line back in order.
    const done = await streamLine('stop', 'done');
    expect(stream.lines.filter((l) => l.startsWith('{"open"'))).toHaveLength(1);
    expect(stream.lines.filter((l) => l.startsWith('{"closed"'))).toEqual([]);
    expect(done.bad).toBeNull();
    expect(done.echoed).toBe(done.sent);
    expect(done.local_port).toBe((JSON.parse(stream.lines.find((l) => l.startsWith('{"open"'))!) as { open: { local_port: number } }).open.local_port);
    expect(done.max_gap_ms).toBeLessThan(GAP_BOUND_MS);
    process.stdout.write(`upgrade test: ${done.sent} lines (${done.bytes} bytes) over one connection, longest pause between echoes ${done.max_gap_ms} ms\n`);
  }, START_BOUND_MS);
});
