// The agent's configuration: environment, key = value file, the shipped example, and every missing or
// invalid value named.
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseConfigFile } from '../../../agent/config.ts';
import { EDGE_IP } from '../../helpers/tunnel-spec.ts';
import { NODE, gateway, KID, tmp, removeTempDirs, sshPub, agentEnv } from './fixtures.ts';

afterAll(removeTempDirs);

describe('agent configuration', () => {
  it('reads the environment, with defaults for AGENT_LISTEN and AGENT_NFT_TABLE', () => {
    const c = loadConfig(agentEnv());
    expect(c.nodeId).toBe(NODE);
    expect(c.listen).toEqual({ host: '0.0.0.0', port: 52222 });
    expect(c.nftTable).toBe('tunnelgate');
    expect(c.edgeIp).toBe(EDGE_IP);
    expect(c.jobKeys[0]!.kid).toBe(KID);
    expect(c.authorizedKey.type).toBe('ssh-ed25519');
    expect(c.authorizedKey.fingerprint).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
    expect(c.sources).toMatchObject({ AGENT_NODE_ID: 'env', AGENT_LISTEN: 'default' });
    expect(loadConfig(agentEnv({ AGENT_LISTEN: '[::1]:2222', AGENT_NODE_ID: NODE.toUpperCase() })).listen).toEqual({ host: '::1', port: 2222 });
    expect(loadConfig(agentEnv({ AGENT_NODE_ID: NODE.toUpperCase() })).nodeId).toBe(NODE);
  });

  it('AGENT_JOB_VERSIONS: every version this agent speaks by default; a subset of them when set', () => {
    expect(loadConfig(agentEnv()).jobVersions).toEqual([1, 2, 3]);
    expect(loadConfig(agentEnv({ AGENT_JOB_VERSIONS: '1' })).jobVersions).toEqual([1]);
    expect(loadConfig(agentEnv({ AGENT_JOB_VERSIONS: ' 2, 1 ,2' })).jobVersions).toEqual([1, 2]);
    expect(loadConfig(agentEnv({ AGENT_JOB_VERSIONS: '3,1,2' })).jobVersions).toEqual([1, 2, 3]);
    for (const bad of ['4', '1,4', 'one', '1;2', '01', ',']) expect(() => loadConfig(agentEnv({ AGENT_JOB_VERSIONS: bad })), bad).toThrow(/AGENT_JOB_VERSIONS must be/);
  });

  it('AGENT_HEALTH_INTERVAL_S: 30 by default, whole seconds from 1 to 86400 when set', () => {
    expect(loadConfig(agentEnv()).healthIntervalS).toBe(30);
    expect(loadConfig(agentEnv({ AGENT_HEALTH_INTERVAL_S: '5' })).healthIntervalS).toBe(5);
    for (const bad of ['0', '-1', '1.5', '86401', 'ten']) expect(() => loadConfig(agentEnv({ AGENT_HEALTH_INTERVAL_S: bad })), bad).toThrow(/AGENT_HEALTH_INTERVAL_S must be/);
  });

  it('reads a key = value file with lower-case keys; the environment overrides it', () => {
    const dir = tmp();
    const file = join(dir, 'agent.conf');
    const pem = gateway.publicKey.export({ format: 'pem', type: 'spki' }).toString().trim().replace(/\n/g, '\\n');
    writeFileSync(
      file,
      [
        '# tunnel-agent',
        `agent_node_id = ${NODE}`,
        'agent_listen = 127.0.0.1:52222',
        `agent_state_dir = ${dir}`,
        `agent_authorized_key = "${sshPub}"`,
        `agent_job_key = ${pem}`,
        `agent_edge_ip = ${EDGE_IP}`,
        'agent_nft_table = tg_test',
        '',
      ].join('\n'),
    );
    const c = loadConfig({}, file);
    expect(c.listen).toEqual({ host: '127.0.0.1', port: 52222 });
    expect(c.nftTable).toBe('tg_test');
    expect(c.jobKeys[0]!.kid).toBeUndefined();
    expect(c.jobKeys[0]!.thumbprint).toBe(KID);
    expect(c.sources.AGENT_JOB_KEY).toBe('file');
    const o = loadConfig({ AGENT_EDGE_IP: '198.51.100.99' }, file);
    expect(o.edgeIp).toBe('198.51.100.99');
    expect(o.sources.AGENT_EDGE_IP).toBe('env');
  });

  it('the shipped example parses', () => {
    const parsed = parseConfigFile(readFileSync(new URL('../../../agent/deploy/agent.conf.example', import.meta.url), 'utf8'));
    expect(Object.keys(parsed).sort()).toEqual(['AGENT_AUTHORIZED_KEY', 'AGENT_EDGE_IP', 'AGENT_JOB_KEY', 'AGENT_LISTEN', 'AGENT_NFT_TABLE', 'AGENT_NODE_ID', 'AGENT_STATE_DIR']);
  });

  it('names every missing or invalid value', () => {
    const problems = (e: NodeJS.ProcessEnv, file?: string) => {
      try {
        loadConfig(e, file);
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        return (err as Error).message;
      }
      throw new Error('loadConfig accepted it');
    };
    const all = problems({});
    for (const k of ['AGENT_NODE_ID', 'AGENT_STATE_DIR', 'AGENT_AUTHORIZED_KEY', 'AGENT_JOB_KEY', 'AGENT_EDGE_IP']) expect(all).toContain(`${k} is not set`);
    expect(all).not.toContain('AGENT_LISTEN');
    expect(problems(agentEnv({ AGENT_NODE_ID: 'node-1' }))).toMatch(/AGENT_NODE_ID must be the node's UUID/);
    expect(problems(agentEnv({ AGENT_LISTEN: '52222' }))).toMatch(/AGENT_LISTEN must be ADDRESS:PORT/);
    expect(problems(agentEnv({ AGENT_LISTEN: '0.0.0.0:70000' }))).toMatch(/AGENT_LISTEN/);
    expect(problems(agentEnv({ AGENT_LISTEN: 'localhost:52222' }))).toMatch(/AGENT_LISTEN/);
    expect(problems(agentEnv({ AGENT_STATE_DIR: 'relative/dir' }))).toMatch(/AGENT_STATE_DIR must be an absolute path/);
    expect(problems(agentEnv({ AGENT_AUTHORIZED_KEY: 'ssh-ed25519 AAAAnotakey' }))).toMatch(/AGENT_AUTHORIZED_KEY/);
    expect(problems(agentEnv({ AGENT_JOB_KEY: JSON.stringify(gateway.privateKey.export({ format: 'jwk' })) }))).toMatch(/AGENT_JOB_KEY.*private key/);
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey.export({ format: 'pem', type: 'spki' }).toString();
    expect(problems(agentEnv({ AGENT_JOB_KEY: rsa }))).toMatch(/AGENT_JOB_KEY.*Ed25519/);
    expect(problems(agentEnv({ AGENT_JOB_KEY: 'secret' }))).toMatch(/AGENT_JOB_KEY/);
    expect(problems(agentEnv({ AGENT_EDGE_IP: '198.51.100' }))).toMatch(/AGENT_EDGE_IP must be/);
    expect(problems(agentEnv({ AGENT_NFT_TABLE: 'bad table' }))).toMatch(/AGENT_NFT_TABLE/);
    const dir = tmp();
    writeFileSync(join(dir, 'typo.conf'), 'agent_nod_id = x\n');
    expect(problems({}, join(dir, 'typo.conf'))).toMatch(/typo.conf:1: unknown key "agent_nod_id"/);
    writeFileSync(join(dir, 'upper.conf'), `AGENT_NODE_ID = ${NODE}\n`);
    expect(problems({}, join(dir, 'upper.conf'))).toMatch(/keys are lower case/);
    writeFileSync(join(dir, 'twice.conf'), `agent_edge_ip = ${EDGE_IP}\nagent_edge_ip = ${EDGE_IP}\n`);
    expect(problems({}, join(dir, 'twice.conf'))).toMatch(/set twice/);
    expect(problems({}, join(dir, 'missing.conf'))).toMatch(/cannot read the config file/);
  });
});
