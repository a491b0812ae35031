// docker-compose.yml as Compose reads it (so a typo there fails here, not at an operator's first start): `docker-compose config` (Debian's Compose
// 1.29, no engine needed) must succeed on a clean clone with no variable set, with and without the edge
// profile, and with the values an operator is told to put in .env; what each service then receives must
// be what it starts with: the gateway refuses to start without its five secrets (SECRETS_FROM_ENV=required)
// and accepts the ones server/deploy/make-env.sh prints; the agent refuses without its node values and
// accepts the ones `node add` prints. The services' own config loaders judge that, not a copy of their rules.
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig as loadAgentConfig } from '../../agent/config.ts';
import { parseSecret, requireSecretsFromEnv, SECRET_ENV, SECRET_NAMES } from '../../server/secrets.ts';
import { onPath, skipUnless } from '../helpers/requirements.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const COMPOSE_FILE = join(ROOT, 'docker-compose.yml');
const dir = mkdtempSync(join(tmpdir(), 'tg-compose-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Service {
  environment?: Record<string, string | number | null>;
  user?: string;
  profiles?: string[];
  env_file?: unknown;
}

/**
 * `docker-compose [--profile P] config` with only PATH and HOME from this process (a developer's shell
 * variables must not leak in) and `envText` as the project's .env (never the clone's own .env).
 */
function composeConfig(envText: string, profile?: string): { status: number | null; stderr: string; services: Record<string, Service> } {
  const envFile = join(dir, `env-${randomUUID()}`);
  writeFileSync(envFile, envText, { mode: 0o600 });
  const args = ['--project-directory', ROOT, '-f', COMPOSE_FILE, '--env-file', envFile, ...(profile ? ['--profile', profile] : []), 'config'];
  const r = spawnSync('docker-compose', args, { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: process.env.HOME ?? dir }, timeout: 60_000 });
  if (r.error) throw r.error;
  const services = r.status === 0 ? ((parse(r.stdout) as { services: Record<string, Service> }).services ?? {}) : {};
  return { status: r.status, stderr: r.stderr, services };
}

/** A service's environment as its process would see it (Compose may print numbers unquoted, null for empty). */
function envOf(s: Service | undefined): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(s?.environment ?? {}).map(([k, v]) => [k, v === null ? '' : String(v)]));
}

describe.skipIf(skipUnless(onPath('docker-compose') && onPath('openssl'), 'compose-file test: docker-compose (Debian package) and openssl'))('docker-compose.yml', () => {
  it('parses with no variable set; the gateway then refuses to start, naming its five secrets', () => {
    const r = composeConfig('');
    expect(r.stderr).not.toMatch(/ERROR|Missing mandatory/);
    expect(r.status).toBe(0);
    // The edge agent is behind its profile: a plain `up` starts PostgreSQL and the gateway only. (Compose
    // 1.29's `config` prints every service whatever the profile, v2's only the active ones: read the field.)
    const unprofiled = Object.entries(r.services).filter(([, s]) => !s.profiles?.length).map(([name]) => name);
    expect(unprofiled.sort()).toEqual(['gateway', 'postgres']);
    const gateway = envOf(r.services.gateway);
    expect(gateway.SECRETS_FROM_ENV).toBe('required');
    // Every secret variable is passed through (empty here), none from an env_file Compose 1.29 would demand.
    for (const n of SECRET_NAMES) expect(gateway).toHaveProperty(SECRET_ENV[n], '');
    expect(r.services.gateway?.env_file).toBeUndefined();
    expect(() => requireSecretsFromEnv(gateway)).toThrow(new RegExp(SECRET_NAMES.map((n) => SECRET_ENV[n]).join(', ')));
  });

  it('parses with the edge profile and no variable set; the agent then refuses to start, naming its values', () => {
    const r = composeConfig('', 'edge');
    expect(r.stderr).not.toMatch(/ERROR|Missing mandatory/);
    expect(r.status).toBe(0);
    expect(Object.keys(r.services).sort()).toEqual(['agent', 'gateway', 'postgres']);
    expect(r.services.agent?.profiles).toEqual(['edge']);
    const agent = envOf(r.services.agent);
    let message = '';
    try {
      loadAgentConfig(agent);
    } catch (e) {
      message = (e as Error).message;
    }
    for (const v of ['AGENT_NODE_ID', 'AGENT_AUTHORIZED_KEY', 'AGENT_JOB_KEY', 'AGENT_EDGE_IP']) expect(message).toContain(`${v} is not set`);
  });

  it('with make-env.sh and the values node add prints in .env, both services take them as they start', () => {
    const made = spawnSync('bash', [join(ROOT, 'server/deploy/make-env.sh')], { encoding: 'utf8' });
    expect(made.stderr).toBe('');
    expect(made.status).toBe(0);
    // KEY='value' lines: single quotes, so a shell's `set -a; . ./.env` (docs/OPERATOR.md "First node") reads them alike.
    const lines = made.stdout.trim().split('\n');
    for (const l of lines) expect(l).toMatch(/^[A-Z_]+='[^']+'$/);
    const secrets = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 2, -1)]));
    expect(Object.keys(secrets).sort()).toEqual(SECRET_NAMES.map((n) => SECRET_ENV[n]).sort());
    // What `node add` prints from these secrets (server/cli/commands.ts): the SSH public key line and the job JWK.
    const ssh = parseSecret('gateway_ssh_key', secrets.GATEWAY_SSH_KEY!);
    const job = parseSecret('job_signing_key', secrets.JOB_SIGNING_KEY!);
    const nodeId = randomUUID();
    const agentValues = { AGENT_NODE_ID: nodeId, AGENT_AUTHORIZED_KEY: ssh.publicKey, AGENT_JOB_KEY: JSON.stringify(job.publicJwk), AGENT_EDGE_IP: '192.0.2.10' };
    const envText = [...Object.entries(secrets), ...Object.entries(agentValues)].map(([k, v]) => `${k}='${v}'`).join('\n') + '\n';

    const r = composeConfig(envText, 'edge');
    expect(r.stderr).not.toMatch(/ERROR/);
    expect(r.status).toBe(0);
    const gateway = envOf(r.services.gateway);
    expect(() => requireSecretsFromEnv(gateway)).not.toThrow();
    // Byte for byte (a PEM's literal \n must survive Compose's .env reading), and parseable by the gateway.
    for (const n of SECRET_NAMES) {
      expect(gateway[SECRET_ENV[n]]).toBe(secrets[SECRET_ENV[n]]);
      expect(() => parseSecret(n, gateway[SECRET_ENV[n]]!)).not.toThrow();
    }
    // The same file sourced by a shell, as docs/OPERATOR.md does for `npm start` and the admin CLI.
    const envFile = join(dir, 'sourced.env');
    writeFileSync(envFile, envText, { mode: 0o600 });
    const sourced = spawnSync('bash', ['-c', 'set -a; . "$1"; set +a; node -e "process.stdout.write(JSON.stringify(process.env))"', 'bash', envFile], { encoding: 'utf8' });
    expect(sourced.status).toBe(0);
    const shellEnv = JSON.parse(sourced.stdout) as Record<string, string>;
    for (const n of SECRET_NAMES) expect(shellEnv[SECRET_ENV[n]]).toBe(secrets[SECRET_ENV[n]]);
    expect(shellEnv.AGENT_JOB_KEY).toBe(agentValues.AGENT_JOB_KEY);

    const agent = loadAgentConfig(envOf(r.services.agent));
    expect(agent.nodeId).toBe(nodeId);
    expect(agent.edgeIp).toBe('192.0.2.10');
    expect(agent.authorizedKey.fingerprint).toBe(ssh.fingerprint);
    expect(agent.jobKeys.map((k) => k.kid)).toEqual([job.kid]);
  });

  it('the gateway image runs as a non-root user; only the agent, which configures the kernel, runs as root', () => {
    const users = [...readFileSync(join(ROOT, 'Dockerfile'), 'utf8').matchAll(/^USER\s+(\S+)/gm)].map((m) => m[1]);
    expect(users.at(-1)).toBe('node');
    const r = composeConfig('', 'edge');
    expect(r.services.gateway?.user).toBeUndefined();
    expect(r.services.postgres?.user).toBeUndefined();
    expect(r.services.agent?.user).toBe('root');
  });
});
