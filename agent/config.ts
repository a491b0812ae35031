// Agent configuration (docs/CONTRACTS.md "Agent configuration"): from the environment, or from a file named
// by `--config`, whose keys are the same names in lower case.
//
// File format: one `key = value` per line; blank lines and lines starting with `#` are ignored; the
// value is everything after the first `=`, trimmed, and may be wrapped in double quotes. Unknown and
// repeated keys are errors. A PEM value must be on one line with `\n` escapes (a JWK fits on one line
// as it is). An environment variable that is set (and not empty) overrides the file's value.
// See agent/deploy/agent.conf.example.
import { isIP } from 'node:net';
import { isAbsolute, resolve } from 'node:path';
import { readFileSync } from 'node:fs';
import { CidrError, parseCidrList, type CidrList } from './cidr.ts';
import { parseIPv4 } from '../common/ipv4.ts';
import { isUuid } from '../common/names.ts';
import { JOB_VERSIONS, isJobVersion, type JobVersion } from '../common/job-contract.ts';
import { JobKeyError, parseJobKeys, type JobKey } from './jobs/job-key.ts';
import { SshKeyError, parseAuthorizedKey, type AuthorizedKey } from './ssh/keys.ts';

const CONFIG_KEYS = [
  'AGENT_NODE_ID',
  'AGENT_LISTEN',
  'AGENT_STATE_DIR',
  'AGENT_AUTHORIZED_KEY',
  'AGENT_JOB_KEY',
  'AGENT_EDGE_IP',
  'AGENT_NFT_TABLE',
  'AGENT_LOG_LEVEL',
  'AGENT_ALLOW_FROM',
  'AGENT_PROTECTED_POOLS',
  'AGENT_JOB_VERSIONS',
  'AGENT_HEALTH_INTERVAL_S',
  'AGENT_WATCHDOG_S',
  'AGENT_EDGE_PPS',
] as const;
export type ConfigKey = (typeof CONFIG_KEYS)[number];

const DEFAULT_LISTEN = '0.0.0.0:52222';
const DEFAULT_NFT_TABLE = 'tunnelgate';
const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const;

export interface AgentConfig {
  /** This node's id (lower case UUID): every job's `aud`. */
  nodeId: string;
  listen: { host: string; port: number };
  /** Absolute path: host key and replay cache. */
  stateDir: string;
  authorizedKey: AuthorizedKey;
  /** One key, or two during a rotation of the gateway's job-signing key (agent/jobs/job-key.ts). */
  jobKeys: readonly JobKey[];
  /** This router's GRE underlay address; every job's `edge_ip`. */
  edgeIp: string;
  nftTable: string;
  logLevel: (typeof LOG_LEVELS)[number];
  /** AGENT_ALLOW_FROM: sources allowed to connect; undefined = any (docs/CONTRACTS.md "Hardening of the listener"). */
  allowFrom?: CidrList;
  /** AGENT_PROTECTED_POOLS: protected IPs a job may name; undefined = any (docs/CONTRACTS.md "Hardening of the listener"). */
  protectedPools?: CidrList;
  /**
   * AGENT_JOB_VERSIONS: the job versions this agent accepts and lists in its `hello` (default all it
   * speaks). `1` stands in for an agent from before version 2: `hello` answered with 127, v 2 refused as
   * unsupported_version (docs/CONTRACTS.md "Agent configuration"); for testing a rolling upgrade.
   */
  jobVersions: JobVersion[];
  /** AGENT_HEALTH_INTERVAL_S (default 30): every tunnel of the desired state is checked once per interval (agent/health). */
  healthIntervalS: number;
  /**
   * AGENT_WATCHDOG_S (default 60): a dataplane operation without progress this long is given up as stuck (its job
   * answers kernel_error), and the agent restarts itself when it cannot recover (housekeeping/activity.ts).
   */
  watchdogS: number;
  /**
   * AGENT_EDGE_PPS (default 2,000,000): the packets a second this edge is rated for; each tunnel's per-source meter
   * holds the sources that rate brings (agent/dataplane/sizing.ts; docs/CONTRACTS.md "Dataplane").
   */
  edgePps: number;
  /** Where each key came from, for the start-up log line. */
  sources: Partial<Record<ConfigKey, 'env' | 'file' | 'default'>>;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Parses the `key = value` file text; keys are returned upper-cased (AGENT_…). */
export function parseConfigFile(text: string, path = 'config file'): Partial<Record<ConfigKey, string>> {
  const out: Partial<Record<ConfigKey, string>> = {};
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '' || line.startsWith('#')) continue;
    const eq = line.indexOf('=');
    if (eq < 0) throw new ConfigError(`${path}:${i + 1}: expected "key = value"`);
    const rawKey = line.slice(0, eq).trim();
    if (rawKey !== rawKey.toLowerCase()) throw new ConfigError(`${path}:${i + 1}: keys are lower case (${rawKey.toLowerCase()})`);
    const key = rawKey.toUpperCase() as ConfigKey;
    if (!CONFIG_KEYS.includes(key)) throw new ConfigError(`${path}:${i + 1}: unknown key "${rawKey}" (known: ${CONFIG_KEYS.map((k) => k.toLowerCase()).join(', ')})`);
    if (key in out) throw new ConfigError(`${path}:${i + 1}: "${rawKey}" is set twice`);
    let value = line.slice(eq + 1).trim();
    if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
    out[key] = value;
  }
  return out;
}

function parseListen(v: string): { host: string; port: number } {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(v);
  const host = m?.[1] ?? m?.[2];
  const port = Number(m?.[3]);
  if (!m || !host || isIP(host) === 0 || !(port >= 0 && port <= 65535)) {
    throw new ConfigError(`AGENT_LISTEN must be ADDRESS:PORT (an IPv4 address, or [IPv6]), e.g. ${DEFAULT_LISTEN}; got "${v}"`);
  }
  return { host, port };
}

/**
 * The agent's configuration from `env`, or from the file at `configPath` with `env` overriding it.
 * Throws ConfigError naming every missing or invalid key.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, configPath?: string): AgentConfig {
  let file: Partial<Record<ConfigKey, string>> = {};
  if (configPath !== undefined) {
    let text: string;
    try {
      text = readFileSync(configPath, 'utf8');
    } catch (e) {
      throw new ConfigError(`cannot read the config file ${configPath}: ${(e as Error).message}`);
    }
    file = parseConfigFile(text, configPath);
  }
  const sources: AgentConfig['sources'] = {};
  const get = (key: ConfigKey, fallback?: string): string | undefined => {
    const fromEnv = env[key]?.trim();
    if (fromEnv) return (sources[key] = 'env'), fromEnv;
    const fromFile = file[key];
    if (fromFile) return (sources[key] = 'file'), fromFile;
    if (fallback !== undefined) return (sources[key] = 'default'), fallback;
    return undefined;
  };

  const problems: string[] = [];
  const need = <T>(key: ConfigKey, parse: (v: string) => T, fallback?: string): T | undefined => {
    const v = get(key, fallback);
    if (v === undefined) {
      problems.push(`${key} is not set`);
      return undefined;
    }
    try {
      return parse(v);
    } catch (e) {
      problems.push(e instanceof ConfigError ? e.message : `${key}: ${(e as Error).message}`);
      return undefined;
    }
  };

  const nodeId = need('AGENT_NODE_ID', (v) => {
    if (!isUuid(v)) throw new ConfigError(`AGENT_NODE_ID must be the node's UUID (from node add), got "${v}"`);
    return v.toLowerCase();
  });
  const listen = need('AGENT_LISTEN', parseListen, DEFAULT_LISTEN);
  const stateDir = need('AGENT_STATE_DIR', (v) => {
    if (!isAbsolute(v)) throw new ConfigError(`AGENT_STATE_DIR must be an absolute path, got "${v}"`);
    return resolve(v);
  });
  const authorizedKey = need('AGENT_AUTHORIZED_KEY', (v) => {
    try {
      return parseAuthorizedKey(v);
    } catch (e) {
      if (e instanceof SshKeyError) throw new ConfigError(`AGENT_AUTHORIZED_KEY (the gateway's SSH public key, "ssh-ed25519 AAAA…") ${e.message}`);
      throw e;
    }
  });
  const jobKeys = need('AGENT_JOB_KEY', (v) => {
    try {
      return parseJobKeys(v);
    } catch (e) {
      if (e instanceof JobKeyError) throw new ConfigError(`AGENT_JOB_KEY (the gateway's job-signing public key, a JWK or SPKI PEM, or two keys during a rotation: a JWK Set or two PEMs): ${e.message}`);
      throw e;
    }
  });
  const edgeIp = need('AGENT_EDGE_IP', (v) => {
    if (parseIPv4(v) === null) throw new ConfigError(`AGENT_EDGE_IP must be this router's IPv4 underlay address, got "${v}"`);
    return v;
  });
  const nftTable = need(
    'AGENT_NFT_TABLE',
    (v) => {
      if (!/^[A-Za-z][A-Za-z0-9_-]{0,63}$/.test(v)) throw new ConfigError(`AGENT_NFT_TABLE must be a plain nftables table name (letters, digits, _ and -, at most 64), got "${v}"`);
      return v;
    },
    DEFAULT_NFT_TABLE,
  );
  const logLevel = need(
    'AGENT_LOG_LEVEL',
    (v) => {
      if (!(LOG_LEVELS as readonly string[]).includes(v)) throw new ConfigError(`AGENT_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got "${v}"`);
      return v as AgentConfig['logLevel'];
    },
    'info',
  );

  // Both default to "any": unset (or empty) means no restriction.
  const cidrs = (key: 'AGENT_ALLOW_FROM' | 'AGENT_PROTECTED_POOLS', what: string, ipv4Only: boolean): CidrList | undefined => {
    const v = get(key);
    if (v === undefined) return undefined;
    try {
      return parseCidrList(v, { ipv4Only });
    } catch (e) {
      if (!(e instanceof CidrError)) throw e;
      problems.push(`${key} must be ${what}, comma-separated (e.g. 192.0.2.0/24,198.51.100.7): ${e.message}`);
      return undefined;
    }
  };
  const jobVersions = need(
    'AGENT_JOB_VERSIONS',
    (v) => {
      const items = v.split(',').map((x) => x.trim());
      const out: JobVersion[] = [];
      for (const item of items) {
        const n = /^[1-9][0-9]{0,2}$/.test(item) ? Number(item) : NaN;
        if (!isJobVersion(n)) throw new ConfigError(`AGENT_JOB_VERSIONS must be a comma-separated list of ${JOB_VERSIONS.join(', ')} (the job versions this agent accepts), got "${v}"`);
        if (!out.includes(n)) out.push(n);
      }
      return out.sort((a, b) => a - b);
    },
    JOB_VERSIONS.join(','),
  );
  const healthIntervalS = need(
    'AGENT_HEALTH_INTERVAL_S',
    (v) => {
      const n = /^[0-9]{1,5}$/.test(v) ? Number(v) : NaN;
      if (!(n >= 1 && n <= 86_400)) throw new ConfigError(`AGENT_HEALTH_INTERVAL_S must be whole seconds from 1 to 86400, got "${v}"`);
      return n;
    },
    '30',
  );
  const watchdogS = need(
    'AGENT_WATCHDOG_S',
    (v) => {
      const n = /^[0-9]{1,4}$/.test(v) ? Number(v) : NaN;
      // At least 2 s: the heartbeat is looked at four times per period, and a second is a GC pause on a slow VM.
      if (!(n >= 2 && n <= 3600)) throw new ConfigError(`AGENT_WATCHDOG_S must be whole seconds from 2 to 3600, got "${v}"`);
      return n;
    },
    '60',
  );
  const edgePps = need(
    'AGENT_EDGE_PPS',
    (v) => {
      const n = /^[0-9]{1,9}$/.test(v) ? Number(v) : NaN;
      if (!(n >= 10_000 && n <= 100_000_000)) throw new ConfigError(`AGENT_EDGE_PPS must be whole packets a second from 10000 to 100000000, got "${v}"`);
      return n;
    },
    '2000000',
  );
  const allowFrom = cidrs('AGENT_ALLOW_FROM', 'the CIDRs the gateway connects from (IPv4 or IPv6)', false);
  const protectedPools = cidrs('AGENT_PROTECTED_POOLS', 'the IPv4 CIDRs of this node\'s protected pools', true);

  if (problems.length > 0) {
    const where = configPath ? ` (environment, or ${configPath} with the keys in lower case)` : ' (environment, or a file named by --config)';
    throw new ConfigError(`invalid agent configuration${where}:\n  - ${problems.join('\n  - ')}`);
  }
  return {
    nodeId: nodeId!,
    listen: listen!,
    stateDir: stateDir!,
    authorizedKey: authorizedKey!,
    jobKeys: jobKeys!,
    edgeIp: edgeIp!,
    nftTable: nftTable!,
    logLevel: logLevel!,
    jobVersions: jobVersions!,
    healthIntervalS: healthIntervalS!,
    watchdogS: watchdogS!,
    edgePps: edgePps!,
    ...(allowFrom ? { allowFrom } : {}),
    ...(protectedPools ? { protectedPools } : {}),
    sources,
  };
}
