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
//      anything, every link is the same link (ifindex) and the DNAT map the same, after the gateway's
//      reconcile too (only the activated tunnel is forwarded: both releases forward only to origins that
//      answered the activate probe). The connection never closed, never reconnected, and every byte came back in order.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { migrationsList } from '../../server/db/migrations/index.ts';
import { call } from '../helpers/gateway.ts';
import { exchange, signIn, token, type Client } from '../helpers/oidc-login.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';
import { verified, WebhookReceiver } from '../helpers/webhook-receiver.ts';
import { isRoot } from '../netns/netns.ts';
import { changelogSection, compareAnswers, readChangelog, undocumentedAdditions, type AnswerDifferences } from './compare-answers.ts';
import { PREVIOUS, ROOT, START_BOUND_MS, scriptValues, UpgradeRig, VERSION, type Tunnel } from './rig.ts';

/** One answer of the REST API, as compared before and after the upgrade. */
interface Answer {
  status: number;
  body: unknown;
}

describe.skipIf(skipUnless(isRoot, 'the upgrade test: root (network namespaces)'))(`an upgrade from ${PREVIOUS.version} to ${VERSION}, with ${PREVIOUS.version}'s own code`, () => {
  const rig = new UpgradeRig(inject('adminDatabaseUrl'));
  let receiver: WebhookReceiver;

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

  const api = (method: string, path: string, opts: Parameters<typeof call>[3] = {}) => rig.api(method, path, opts);
  /** The agent versions this release's gateway met, in order: each `hello` it logged (one per new SSH connection). */
  const agentHellos = (): string[] =>
    rig.gateways[1]!.lines.flatMap((line) => {
      try {
        const l = JSON.parse(line) as { msg?: string; agent?: string };
        return l.msg === 'edge agent hello' ? [String(l.agent)] : [];
      } catch {
        return [];
      }
    });

  /** Every REST answer compared across the upgrade, read with the previous release's credentials. */
  const snapshot = async (): Promise<Record<string, Answer>> => {
    const out: Record<string, Answer> = {};
    const get = async (label: string, path: string, bearer = writeKey) => {
      const r = await call(rig.url, 'GET', path, { token: bearer });
      out[label] = { status: r.status, body: r.body };
      return r;
    };
    await get('tunnels', '/api/dedicated');
    await get('tunnels with the read key', '/api/dedicated', readKey);
    await get('tunnels with the OAuth access token', '/api/dedicated', accessToken);
    for (const role of ['web', 'game', 'later', 'gone'] as const) await get(`tunnel ${role}`, `/api/dedicated/${t[role].id}`);
    for (const role of ['web', 'game', 'later'] as const) {
      const r = await call(rig.url, 'GET', `/api/dedicated/${t[role].id}/setup`, { token: readKey });
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
    await rig.open();
    receiver = await WebhookReceiver.start();
  }, 60_000);

  afterAll(async () => {
    await receiver?.close();
    await rig.close();
  });

  it(`${PREVIOUS.version}: its gateway migrates a fresh database, its CLI, REST and agent make tunnels, keys, a webhook and an OAuth grant`, async () => {
    await rig.startGateway('previous');
    migrationsBefore = await rig.migrationsApplied();

    // Three lanes of its CLI (each process loads the whole gateway), the node's lane then starting its agent.
    let clientCreated: Record<string, unknown> = {};
    await Promise.all([
      rig.registerPreviousEdge(),
      (async () => {
        writeKey = await rig.makeBuyer(buyer);
        readKey = String((await rig.admin(['apikey', 'create', '--email', buyer.email, '--permission', 'read'], { previous: true })).key);
      })(),
      (async () => {
        await rig.admin(['promocode', 'create', '--code', promocode, '--percent', '10'], { previous: true });
        clientCreated = await rig.admin(['client', 'create', '--name', 'Upgrade App', '--redirect-uri', 'http://127.0.0.1:9/cb', '--api-access', 'write'], { previous: true });
      })(),
    ]);
    expect(readKey).toMatch(/^svc_/);
    oauth = { id: String(clientCreated.client_id), secret: String(clientCreated.client_secret), redirectUri: 'http://127.0.0.1:9/cb' };

    const hook = await api('POST', '/api/webhooks', { body: { url: receiver.url('/hook') } });
    expect(hook.status, JSON.stringify(hook.body)).toBe(201);
    webhookSecret = (hook.body as { secret: string }).secret;

    t.web = await rig.buy({ name: 'web', origin_ip: '8.8.4.4', ports: '8080', protocol: 'tcp', protection: { source_pps_limit: 1000, drop_fragments: true } });
    t.game = await rig.buy({ name: 'game', origin_ip: '8.8.8.8', ports: '27015,25565-25575', protocol: 'udp', protection: { source_pps_limit: 500 } });
    const laterBody = { name: 'later', origin_ip: '1.1.1.1', protocol: 'both', protection: { syn_proxy: true }, promocode };
    const key = `upgrade-${randomBytes(4).toString('hex')}`;
    const first = await api('POST', '/api/dedicated', { body: laterBody, headers: { 'idempotency-key': key } });
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    replay = { key, body: laterBody, first: { status: first.status, body: first.body } };
    t.later = (first.body as { tunnel: Tunnel }).tunnel;
    t.gone = await rig.buy({ name: 'gone', origin_ip: '9.9.9.9' });
    for (const role of ['web', 'game', 'gone'] as const) await rig.provision(t[role]);
    await rig.remove(t.gone);

    // The web tunnel's origin with a TCP echo service, the buyer's activate, and the client's one
    // connection through the protected IP, kept to the end.
    await rig.openConnection(t.web);
    await rig.flows(50, `through ${PREVIOUS.version}'s agent`);

    // The OAuth client's grant: the buyer signs in and consents; an access and a refresh token.
    const signedIn = await signIn(rig.url, oauth, buyer);
    const tokens = await exchange(rig.url, oauth, signedIn.code, signedIn.verifier);
    expect(tokens.status, JSON.stringify(tokens.body)).toBe(200);
    accessToken = tokens.body.access_token!;
    refreshToken = tokens.body.refresh_token!;
    expect(refreshToken).toBeTruthy();

    // What the previous release's agent holds: links of the tunnels on the edge, the active one mapped.
    expect(rig.edge.links().sort()).toEqual([t.web.tunnel_name, t.game.tunnel_name].sort());
    expect(rig.edge.mapElements()).toEqual([t.web.protected_ip]);
    before = await snapshot();
    for (const [label, a] of Object.entries(before)) expect(a.status, `${label}: ${JSON.stringify(a.body)}`).toBe(200);
    // Its webhook deliveries so far, signed with the secret it gave.
    await until('deliveries of the previous release', () => receiver.to('/hook').length > 0);
    for (const d of receiver.to('/hook')) expect(verified(webhookSecret, d).type).toMatch(/^tunnel\./);
  }, START_BOUND_MS);

  it(`the database upgrade: ${VERSION}'s gateway migrates it and answers as ${PREVIOUS.version} did, for the same credentials`, async () => {
    const old = rig.gateways[0]!;
    old.kill('SIGTERM');
    expect(await old.exited).toBe(0);
    await rig.startGateway('this');
    // Every migration of this release applied, after those of the previous one.
    const applied = await rig.migrationsApplied();
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
    const refreshed = await token(rig.url, oauth, { grant_type: 'refresh_token', refresh_token: refreshToken });
    expect(refreshed.status, JSON.stringify(refreshed.body)).toBe(200);
    const list = await call(rig.url, 'GET', '/api/dedicated', { token: refreshed.body.access_token });
    expect({ status: list.status, body: list.body }).toEqual(after['tunnels']);

    // The purchase replayed with its Idempotency-Key: the first answer again, and no second charge.
    const again = await api('POST', '/api/dedicated', { body: replay.body, headers: { 'idempotency-key': replay.key } });
    expect(compareAnswers(replay.first, { status: again.status, body: again.body }, 'replayed purchase').changed).toEqual([]);
    expect((await api('GET', '/api/ledger')).body).toEqual(after['ledger']!.body);
  }, START_BOUND_MS);

  it(`the agent upgrade: ${VERSION}'s gateway drives ${PREVIOUS.version}'s agent, which is then replaced under a live connection`, async () => {
    // A new tunnel and new settings on an old one, through the previous release's agent.
    const hooksBefore = receiver.to('/hook').length;
    t.new = await rig.buy({ name: 'new', origin_ip: '8.26.56.26', ports: '443', protocol: 'tcp', protection: { syn_proxy: true } });
    await rig.provision(t.new);
    const patched = await api('PATCH', `/api/dedicated/${t.game.id}`, { body: { ports: '25565-25575,27015,28000' } });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    expect((patched.body as { tunnel: Tunnel }).tunnel.ports).toBe('25565-25575,27015,28000');
    // Both reached the previous release's agent (its call lines come on another pipe than the gateway's answers).
    for (const id of [t.new.id, t.game.id]) await rig.edge.waitForCall((c) => c.run === 1 && c.call === 'apply' && c.ids.includes(id));
    // The agent it drove is the previous release (its `hello` names its version), and it holds the new port.
    await until(`the gateway's hello to ${PREVIOUS.version}'s agent`, () => agentHellos().length > 0);
    expect(new Set(agentHellos())).toEqual(new Set([PREVIOUS.version]));
    expect(rig.edge.netns.run('nft', 'list', 'table', 'ip', 'tunnelgate')).toContain(`${t.game.protected_ip} . udp . 28000`);
    const onEdge = [t.web, t.game, t.new].map((x) => x.tunnel_name).sort();
    expect(rig.edge.links().sort()).toEqual(onEdge);
    // This release's deliveries still verify with the secret the previous release gave.
    const delivered = await until('a delivery about the new tunnel', () =>
      receiver.to('/hook').slice(hooksBefore).find((d) => verified(webhookSecret, d).data.tunnel.id === t.new.id),
    );
    expect(verified(webhookSecret, delivered).type).toBe('tunnel.status_changed');

    // The dataplane as the previous release's agent left it.
    const links = rig.linkIndexes();
    const mapped = rig.edge.mapElements().sort();
    expect(Object.keys(links).sort()).toEqual(onEdge);
    expect(mapped).toContain(t.web.protected_ip);
    await rig.flows(50, 'before the restart');

    // `systemctl restart`: SIGTERM, and while no agent runs the connection still flows (the kernel holds the
    // dataplane). Held `after` (released at once): each call is reported once the kernel has it, so the
    // reconcile below is seen done, not just begun.
    await rig.restartAgentAsThisRelease({ log: true, hold: 'after' });
    const restored = rig.edge.logs.find((l) => l.run === 2 && l.msg === 'restored the last desired state');
    expect(restored, 'the new agent logs its restore').toBeDefined();
    expect({ added: restored!.added, removed: restored!.removed, failed: restored!.failed }).toEqual({ added: 0, removed: 0, failed: 0 });
    expect(Number(restored!.unchanged) + Number(restored!.changed)).toBe(onEdge.length);
    expect(rig.linkIndexes()).toEqual(links);
    // The restore keeps every element, and a reconcile the gateway may already have sent on the new
    // connection agrees with it.
    expect(rig.edge.mapElements().sort()).toEqual(mapped);
    await rig.flows(50, `through ${VERSION}'s agent`);

    // The gateway's reconcile of the node, now on this release's agent: every tunnel kept, nothing recreated.
    const from = rig.edge.calls.length;
    await rig.admin(['node', 'reconcile', '--id', rig.edge.nodeId]);
    const reconciled = await rig.edge.waitForCall((c) => c.call === 'reconcile' && c.run === 2, from);
    expect([...reconciled.ids].sort()).toEqual([t.web.id, t.game.id, t.new.id].sort());
    // Over a new connection, to this release's agent (its hello line reaches this process on another pipe than the call's).
    expect(await until(`a hello from ${VERSION}'s agent`, () => agentHellos().at(-1) === VERSION)).toBe(true);
    expect(rig.linkIndexes()).toEqual(links);
    // Both releases forward only to an origin that answered the activate probe (job version 3 `forwarding`):
    // the active tunnel keeps its element untouched, the others never had one, and the live connection
    // through it flows on (checked below).
    expect(rig.edge.mapElements()).toEqual([t.web.protected_ip]);
    expect(mapped).toEqual([t.web.protected_ip]);
    for (const x of [t.web, t.game, t.new]) expect(await rig.statusOf(x.id)).toBe(x === t.web ? 'active' : 'provisioned');

    // The connection: one socket from before the database upgrade to now, every line back in order.
    const done = await rig.endConnection();
    process.stdout.write(`upgrade test: ${done.sent} lines (${done.bytes} bytes) over one connection, longest pause between echoes ${done.max_gap_ms} ms\n`);
  }, START_BOUND_MS);
});
