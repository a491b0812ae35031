// Who and what the agent's SSH server lets in (agent/main.ts startAgent on 127.0.0.1): every refused kind of
// authentication and channel request, OpenSSH's own client, the host key's persistence and pinning, transport
// errors, and a stop that lets a running job answer. Jobs and versions are agent-ssh.test.ts. The dataplane is a
// FAKE (test/helpers/agent-ssh.ts RecordingDataplane): the kernel side has its own namespace tests.
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import type { ConnectConfig } from 'ssh2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EdgeConnections } from '../../server/edge/connections.ts';
import { EdgeSshError } from '../../server/edge/result-line.ts';
import { HOST_KEY_FILE } from '../../agent/ssh/keys.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { cleanup, connect, envOf, exec, gatewayKey, has, otherKey, pool, run, sign, start, tmp, tunnel, type Agent } from '../helpers/agent-ssh.ts';
let agent: Agent;
/** The gateway's connections to the shared agent. */
let edge: EdgeConnections;
beforeAll(async () => {
  agent = await start();
  edge = pool();
});
afterAll(async () => {
  await agent?.running.stop(1000);
  await cleanup();
});

describe('agent SSH: shutdown', () => {
  it('stop lets a running job finish and answer, then closes; the dataplane is not closed', async () => {
    const a = await start(tmp());
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const apply = a.dataplane.apply.bind(a.dataplane);
    let entered = false;
    a.dataplane.apply = async (t) => {
      entered = true;
      await gate;
      return apply(t);
    };
    let closed = false;
    a.dataplane.close = async () => void (closed = true);
    let lost!: () => void;
    const connectionLost = new Promise<void>((r) => (lost = r));
    const job = pool(gatewayKey.privateKey, 10_000, () => lost()).run(a.node, await sign('apply', { tunnel: tunnel() }), 10_000);
    for (let i = 0; !entered && i < 500; i++) await new Promise((r) => setTimeout(r, 10));
    expect(entered).toBe(true);
    let stopped = false;
    const stopping = a.running.stop(10_000).then(() => (stopped = true));
    await new Promise((r) => setTimeout(r, 100));
    expect(stopped).toBe(false); // still draining: the job holds it
    release();
    expect(await job).toMatchObject({ ok: true, op: 'apply' });
    await stopping;
    expect(stopped).toBe(true);
    expect(closed).toBe(false);
    // The agent ended the gateway's warm connection, and is no longer listening for a new one.
    await connectionLost;
    await expect(pool(gatewayKey.privateKey, 5_000).run(a.node, await sign('apply', { tunnel: tunnel() }), 5_000)).rejects.toMatchObject({ kind: 'connect_failed' });
  });
});

describe('agent SSH: authentication', () => {
  it('refuses another client key, through the worker\'s connection pool and a raw client', async () => {
    const jws = await sign('apply', { tunnel: tunnel() });
    const err = await pool(otherKey.privateKey).run(agent.node, jws, 10_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EdgeSshError);
    expect(err).toMatchObject({ kind: 'auth_failed', retryable: false });
    await expect(connect(agent, { privateKey: otherKey.privateKey })).rejects.toMatchObject({ level: 'client-authentication' });
    expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'ssh authentication refused', reason: "not the gateway's key" }));
  });

  it('refuses a client that offers the gateway\'s public key but cannot sign with it', async () => {
    // The public key is public: offering it must not be enough. This client presents the gateway's key
    // blob and signs the session with another key.
    const parse = (text: string) => {
      const k = ssh2.utils.parseKey(text);
      if (k instanceof Error || Array.isArray(k)) throw new Error('unexpected key');
      return k;
    };
    const forged = parse(gatewayKey.privateKey);
    const intruder = parse(otherKey.privateKey);
    forged.sign = (data: Buffer | string, algo?: string) => intruder.sign(data, algo);
    let offered = false;
    const err = await connect(agent, {
      privateKey: undefined,
      authHandler: (_left: unknown, _partial: unknown, next: (m: unknown) => void) => {
        if (offered) return next(false);
        offered = true;
        next({ type: 'publickey', username: 'tunnelgate', key: forged });
      },
    } as unknown as Partial<ConnectConfig>).catch((e: unknown) => e);
    expect(offered).toBe(true);
    expect(err).toMatchObject({ level: 'client-authentication' });
    expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'ssh authentication refused', reason: 'bad signature' }));
  });

  it('refuses another user, even with the gateway key', async () => {
    await expect(connect(agent, { username: 'root' })).rejects.toMatchObject({ level: 'client-authentication' });
  });

  it('refuses password, keyboard-interactive and none', async () => {
    await expect(connect(agent, { privateKey: undefined, password: 'hunter2', authHandler: ['password'] })).rejects.toMatchObject({ level: 'client-authentication' });
    await expect(connect(agent, { privateKey: undefined, tryKeyboard: true, authHandler: ['keyboard-interactive'] })).rejects.toMatchObject({ level: 'client-authentication' });
    await expect(connect(agent, { privateKey: undefined, authHandler: ['none'] })).rejects.toMatchObject({ level: 'client-authentication' });
    expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'ssh authentication refused', method: 'password' }));
    expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'ssh authentication refused', method: 'keyboard-interactive' }));
  });
});

describe('agent SSH: channels', () => {
  it('refuses shell, pty, subsystems, X11 and every kind of forwarding; exec still works after', async () => {
    // strictVendor off: ssh2 would otherwise not send OpenSSH's streamlocal requests to a non-OpenSSH server.
    const conn = await connect(agent, { strictVendor: false });
    const refused = (fn: (cb: (err: Error | null | undefined) => void) => void) =>
      new Promise<Error | null | undefined>((resolve) => {
        const timer = setTimeout(() => resolve(undefined), 5000);
        fn((err) => {
          clearTimeout(timer);
          resolve(err);
        });
      });
    try {
      expect(await refused((cb) => conn.shell(false, (err) => cb(err)))).toBeInstanceOf(Error); // a shell without a pty
      expect(await refused((cb) => conn.shell({ term: 'xterm' }, (err) => cb(err)))).toBeInstanceOf(Error); // pty first
      expect(await refused((cb) => conn.exec('tunnel-agent job', { pty: true }, (err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.exec('tunnel-agent job', { x11: true }, (err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.sftp((err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.subsys('netconf', (err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.forwardOut('127.0.0.1', 40000, '127.0.0.1', 22, (err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.forwardIn('127.0.0.1', 0, (err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.openssh_forwardOutStreamLocal('/run/some.sock', (err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.openssh_forwardInStreamLocal('/tmp/tg-agent-test.sock', (err) => cb(err)))).toBeInstanceOf(Error);
      for (const request of ['shell', 'pty', 'sftp', 'subsystem', 'x11', 'direct-tcpip', 'tcpip-forward', 'direct-streamlocal', 'streamlocal-forward@openssh.com']) {
        expect(agent.logs, request).toContainEqual(expect.objectContaining({ msg: 'ssh request refused', request }));
      }
      const ok = await exec(conn, 'tunnel-agent job', await sign('apply', { tunnel: tunnel() }));
      expect(ok.code).toBe(0);
    } finally {
      conn.end();
    }
  });

  it('OpenSSH\'s own client runs a job too, checking the host key from known_hosts', async (ctx) => {
    if (skipUnless(has('ssh'), 'OpenSSH\'s client, ssh (apt-get install openssh-client)')) ctx.skip();
    const dir = tmp();
    writeFileSync(join(dir, 'id'), gatewayKey.privateKey, { mode: 0o600 });
    writeFileSync(join(dir, 'known_hosts'), `[127.0.0.1]:${agent.node.port} ${agent.running.hostKey.publicKey}\n`);
    const args = ['-F', '/dev/null', '-p', String(agent.node.port), '-i', join(dir, 'id'), '-o', 'IdentitiesOnly=yes', '-o', 'BatchMode=yes', '-o', `UserKnownHostsFile=${join(dir, 'known_hosts')}`, '-o', 'StrictHostKeyChecking=yes', '-o', 'LogLevel=ERROR'];
    const jws = await sign('apply', { tunnel: tunnel() });
    const r = await run('ssh', [...args, 'tunnelgate@127.0.0.1', 'tunnel-agent job'], jws);
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ ok: true, op: 'apply' });
    // hello with no stdin (OpenSSH's -n: stdin from /dev/null).
    const hello = await run('ssh', [...args, '-n', 'tunnelgate@127.0.0.1', 'tunnel-agent hello'], '');
    expect(hello.status, hello.stderr).toBe(0);
    expect(hello.stdout).toBe(`${JSON.stringify({ ok: true, versions: [1, 2, 3], agent: JSON.parse(readFileSync(new URL('../../agent/package.json', import.meta.url), 'utf8')).version, features: ['attacks', 'status_delta'] })}\n`);
    const no = await run('ssh', [...args, 'tunnelgate@127.0.0.1', 'tunnel-agent job; ls'], jws);
    expect(no.status).toBe(127);
    expect(JSON.parse(no.stdout)).toMatchObject({ ok: false, error: 'unsupported_command' });
    // An interactive login: pty and shell are refused, so ssh ends with an error instead of a prompt.
    const shell = await run('ssh', [...args, '-tt', 'tunnelgate@127.0.0.1'], 'id\n');
    expect(shell.status).not.toBe(0);
    expect(shell.status).not.toBeNull();
  });
});

describe('agent SSH: host key', () => {
  it('is generated once, kept 0600, and the same after a restart', async () => {
    const stateDir = tmp();
    const first = await start(stateDir);
    const fp = first.running.hostKey.fingerprint;
    expect(fp).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
    expect(first.running.hostKey.created).toBe(true);
    const path = join(stateDir, HOST_KEY_FILE);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readFileSync(path, 'utf8')).toMatch(/^-----BEGIN OPENSSH PRIVATE KEY-----\n/);
    // The key the client sees is the one whose fingerprint was printed.
    let seen: string | undefined;
    const jws = await sign('apply', { tunnel: tunnel() });
    const { sshFingerprint } = await import('../../common/openssh.ts');
    const conn = await connect(first, { hostVerifier: (key: Buffer) => ((seen = sshFingerprint(key)), true) });
    conn.end();
    expect(seen).toBe(fp);
    await first.running.stop(1000);

    const second = await start(stateDir);
    try {
      expect(second.running.hostKey.created).toBe(false);
      expect(second.running.hostKey.fingerprint).toBe(fp);
      // The gateway's pin, recorded from the first start, still holds.
      expect(await pool().run(second.node, jws, 10_000)).toMatchObject({ ok: true });
    } finally {
      await second.running.stop(1000);
    }
  });

  it('matches what ssh-keygen reads from the stored key', async (ctx) => {
    if (skipUnless(has('ssh-keygen'), 'ssh-keygen (apt-get install openssh-client)')) ctx.skip();
    const path = join(agent.stateDir, HOST_KEY_FILE);
    const pub = execFileSync('ssh-keygen', ['-y', '-f', path], { encoding: 'utf8' }).trim();
    expect(pub.split(' ').slice(0, 2).join(' ')).toBe(agent.running.hostKey.publicKey.split(' ').slice(0, 2).join(' '));
    const listed = execFileSync('ssh-keygen', ['-l', '-E', 'sha256', '-f', path], { encoding: 'utf8' });
    expect(listed.split(' ')[1]).toBe(agent.running.hostKey.fingerprint);
  });

  it('a wrong pinned fingerprint refuses to send the job', async () => {
    const before = agent.dataplane.calls.length;
    const logsBefore = agent.logs.length;
    const jws = await sign('apply', { tunnel: tunnel() });
    const wrong = { ...agent.node, hostKeyFingerprint: otherKey.fingerprint };
    const err = await edge.run(wrong, jws, 10_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EdgeSshError);
    expect(err).toMatchObject({ kind: 'host_key_mismatch', retryable: false, presentedFingerprint: agent.running.hostKey.fingerprint });
    expect(agent.dataplane.calls.length).toBe(before);
    // The client gave up before authenticating: the agent never saw a login, let alone the job.
    const after = agent.logs.slice(logsBefore).map((l) => l.msg);
    expect(after).not.toContain('ssh client authenticated');
    expect(after.filter((m) => String(m).startsWith('job'))).toEqual([]);
    // The JWS was never delivered, so it is still fresh with the right pin.
    expect(await edge.run(agent.node, jws, 10_000)).toMatchObject({ ok: true });
    // A fingerprint with OpenSSH's optional padding is the same pin.
    expect(await edge.run({ ...agent.node, hostKeyFingerprint: `${agent.node.hostKeyFingerprint}=` }, await sign('apply', { tunnel: tunnel() }), 10_000)).toMatchObject({ ok: true });
  });

  it('`tunnel-agent fingerprint` prints the stored key\'s fingerprint', () => {
    const r = spawnSync(process.execPath, ['agent/bin/tunnel-agent.mjs', 'fingerprint'], {
      encoding: 'utf8',
      env: { ...process.env, ...envOf(agent.stateDir) },
      timeout: 30_000,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toBe(`${agent.running.hostKey.fingerprint}\n`);
    const bad = spawnSync(process.execPath, ['agent/bin/tunnel-agent.mjs', 'fingerprint'], { encoding: 'utf8', env: { ...process.env, ...envOf(agent.stateDir), AGENT_NODE_ID: 'x' }, timeout: 30_000 });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/AGENT_NODE_ID must be the node's UUID/);
  });

  it('reports an unreachable agent and a timeout as retryable transport errors', async () => {
    const closed = await start(tmp());
    const node = closed.node;
    await closed.running.stop(1000);
    const err = await pool(gatewayKey.privateKey, 5_000).run(node, 'x.y.z', 5_000).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'connect_failed', retryable: true });
    // A 1 ms connect timeout: the handshake cannot finish in time.
    const t = await pool(gatewayKey.privateKey, 1).run(agent.node, 'x.y.z', 10_000).catch((e: unknown) => e);
    expect(t).toMatchObject({ kind: 'timeout', retryable: true });
  });
});
