// The dataplane's records (agent/dataplane/state.ts) on a real file system: which commits pay an fdatasync.
// fdatasyncSync is wrapped (the real call still runs) only to count the calls: nothing else observes it.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';

const syncs: number[] = [];
vi.mock('node:fs', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:fs')>();
  return {
    ...real,
    fdatasyncSync: (fd: number) => {
      syncs.push(fd);
      real.fdatasyncSync(fd);
    },
  };
});

const { DESIRED_FILE, STATE_FILE, StateStore } = await import('../../../agent/dataplane/state.ts');
const { numberedTunnels } = await import('../../netns/dataplane-edge.ts');

/** Tunnel i of the dataplane tests: tg-<i>, protected 203.0.113.<i>. */
const spec = numberedTunnels('tg-', 113);

describe('StateStore durability', () => {
  it('the desired state is fdatasynced on every commit; the records of kernel state are written without one', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tg-state-'));
    const state = StateStore.open(dir);
    const desired = StateStore.open(dir, DESIRED_FILE);
    syncs.length = 0;
    // One single-tunnel apply: desired, then intent, then the result (edge-dataplane.ts run()).
    desired.commit([{ spec: spec(1) }], []);
    state.commit([{ spec: spec(1), pending: true }], []);
    state.commit([{ spec: spec(1) }], []);
    expect(syncs).toHaveLength(1);
    // Written all the same (the page cache: what a crash or kill of the agent keeps), and read back in order.
    expect(readFileSync(join(dir, STATE_FILE), 'utf8').trim().split('\n')).toHaveLength(2);
    state.close();
    desired.close();
    const again = StateStore.open(dir);
    expect(again.tunnels.get(spec(1).id)).toEqual({ spec: spec(1) });
    again.close();
    expect(fs.existsSync(join(dir, DESIRED_FILE))).toBe(true);
  });

  it('keeps its index with its records: by name, by protected IP, and users of shared objects', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tg-state-'));
    const state = StateStore.open(dir);
    const withPolicy = { ...spec(2), policy: { ports: '*' as const, protocol: 'both' as const, syn_proxy: true, source_pps_limit: 100, drop_fragments: false } };
    state.commit([{ spec: spec(1) }, { spec: withPolicy }], []);
    expect([...(state.index.byName('tg-2') ?? [])]).toEqual([withPolicy.id]);
    expect([...state.index.chainUsers()].sort()).toEqual([['flows_65536', 2], ['ratelimit_tg-2_100', 1]]);
    // A rename and a new IP move the entries; a removal drops them and its shared-object use.
    state.commit([{ spec: { ...withPolicy, tunnel_name: 'tg-22', protected_ip: '203.0.113.22' } }], []);
    expect(state.index.byName('tg-2')).toBeUndefined();
    expect([...(state.index.byIp('203.0.113.22') ?? [])]).toEqual([withPolicy.id]);
    state.commit([], [withPolicy.id]);
    expect(state.index.byName('tg-22')).toBeUndefined();
    expect([...state.index.chainUsers()]).toEqual([['flows_65536', 1]]);
    expect([...state.index.mssUsers()]).toEqual([]);
    state.close();
    // Read back at start: the index is rebuilt from the journal.
    const again = StateStore.open(dir);
    expect([...(again.index.byIp('203.0.113.1') ?? [])]).toEqual([spec(1).id]);
    again.close();
  });

  it('a pending change keeps the specs it replaces through a restart, and loses them once confirmed', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tg-state-'));
    const state = StateStore.open(dir);
    const renamed = { ...spec(3), tunnel_name: 'tg-33' };
    state.commit([{ spec: spec(3) }], []);
    state.commit([{ spec: renamed, pending: true, was: [spec(3)] }], []);
    state.close();
    const again = StateStore.open(dir);
    expect(again.tunnels.get(spec(3).id)).toEqual({ spec: renamed, pending: true, was: [spec(3)] });
    expect([...(again.index.byName('tg-3') ?? [])]).toEqual([spec(3).id]);
    expect([...(again.index.byName('tg-33') ?? [])]).toEqual([spec(3).id]);
    again.commit([{ spec: renamed }], []);
    expect(again.index.byName('tg-3')).toBeUndefined();
    // The compacted journal says the same.
    again.snapshot();
    again.close();
    expect(StateStore.open(dir).tunnels.get(spec(3).id)).toEqual({ spec: renamed });
  });

  it('a journal line whose earlier specs are not whole specs still keeps its record, and only the valid ones', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tg-state-'));
    const kept = { ...spec(6), tunnel_name: 'tg-66' };
    const lines = [
      { v: 1, put: spec(4), pending: true, was: [{ nope: 1 }] },
      { v: 1, put: spec(5), pending: true, was: 'tg-5' },
      // Only an id is no spec: it would break every diff touching the tunnel.
      { v: 1, put: spec(6), pending: true, was: [{ id: spec(6).id }, kept] },
    ];
    writeFileSync(join(dir, STATE_FILE), lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
    const store = StateStore.open(dir);
    expect(store.tunnels.get(spec(4).id)).toEqual({ spec: spec(4), pending: true });
    expect(store.tunnels.get(spec(5).id)).toEqual({ spec: spec(5), pending: true });
    expect(store.tunnels.get(spec(6).id)).toEqual({ spec: spec(6), pending: true, was: [kept] });
  });
});
