// One status collection round of a fleet, on the gateway's side (server/health/ingest.ts; docs/CONTRACTS.md
// "Status by change"): TG_INGEST_NODES nodes (default 1,000) of TG_INGEST_TUNNELS tunnels each (default 1,000),
// TG_INGEST_BUSY of them (default 0.1) carrying traffic in a round, ingested TG_INGEST_LANES nodes at a time (default
// 8, the collector's concurrency on one replica) into a real PostgreSQL (BENCH_DATABASE_URL or the local test
// cluster). The answers are built here as the agent's reporter would send them (no SSH, no agent: the gateway's
// ingest and the database are what is measured, with what the collector does per node beside it: the stored cursor
// read and the poll row written; bench:fleet measures the whole path).
//
//   - full round: every node answers every tunnel (an agent without `status_delta`, and every node's first round);
//   - change round: every node answers only its busy tunnels (10%), the idle ones cost nothing.
// Against the collection interval (30 s) and a ceiling measured in the same run: one bare COPY of the change
// round's rows (the seen rows and the minute rows, same columns and keys) into plain tables, one stream, nothing
// else: what writing those rows costs at least on this PostgreSQL.
//
// How the rows go in (the batch question): the same change round's seen upserts, per node, written four ways over
// the same lanes: one statement with the rows as one JSON document (jsonb_to_recordset, what ingest.ts does), one
// statement with the rows as arrays (unnest), COPY into a temporary table then one upsert from it, and one statement
// per row (for scale).
//
//   npm run bench:ingest
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { ensureLocalPostgres } from '../test/helpers/postgres.ts';
import { StatusIngest } from '../server/health/ingest.ts';
import { TrafficStore } from '../server/health/storage.ts';
import { DROP_REASONS, type StatusResult, type TunnelReport } from '../common/tunnel-status.ts';
import { createBenchDatabase } from './lib/database.ts';
import { report } from './lib/report.ts';

const NODES = Number(process.env.TG_INGEST_NODES ?? 1000);
const TUNNELS = Number(process.env.TG_INGEST_TUNNELS ?? 1000);
const BUSY = Number(process.env.TG_INGEST_BUSY ?? 0.1);
const LANES = Number(process.env.TG_INGEST_LANES ?? 8);
const CHANGE_ROUNDS = Number(process.env.TG_INGEST_ROUNDS ?? 3);
const INTERVAL_S = 30;
const WRITE_REPEATS = 3;

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
};
const r1 = (x: number) => +x.toFixed(1);
const r2 = (x: number) => +x.toFixed(2);

interface Node {
  id: string;
  tunnels: string[];
  /** packets_in per tunnel (the other counters follow from it). */
  packets: number[];
  seq: number;
}

const zeroDrops = Object.fromEntries(DROP_REASONS.map((r) => [r, 0])) as TunnelReport['counters']['dropped'];

function report1(id: string, p: number, checkedAt: string): TunnelReport {
  return { id, health: 'up', checked_at: checkedAt, counters: { packets_in: p, bytes_in: p * 900, packets_out: p, bytes_out: p * 700, dropped: zeroDrops } };
}

/** The answer of `n` with every tunnel (full) or only `busy` ones (by change since the previous answer). */
function answer(n: Node, at: number, busy: number[] | null): StatusResult {
  const checked = new Date(at - 1000).toISOString();
  const seq = ++n.seq;
  const list = busy ?? n.tunnels.map((_, i) => i);
  return {
    agent: { version: 'bench', uptime_s: 1, tunnels: n.tunnels.length },
    tunnels: list.map((i) => report1(n.tunnels[i]!, n.packets[i]!, checked)),
    delta: busy === null ? { epoch: 'bench', seq, full: true, gone: [], checked_floor: checked } : { epoch: 'bench', seq, full: false, base: seq - 1, gone: [], checked_floor: checked },
  };
}

/** Runs `fn` over every node, `LANES` at a time; returns the wall time and each call's time (ms). */
async function lanes(nodes: Node[], fn: (n: Node) => Promise<void>): Promise<{ wallMs: number; each: number[] }> {
  const each: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: LANES }, async () => {
      while (next < nodes.length) {
        const n = nodes[next++]!;
        const s = performance.now();
        await fn(n);
        each.push(performance.now() - s);
      }
    }),
  );
  return { wallMs: performance.now() - t0, each };
}

/** What the collector writes per node beside the ingest (server/health/collector.ts): the node's poll row. */
async function notePoll(pool: pg.Pool, n: Node, at: number): Promise<void> {
  await pool.query(
    `insert into traffic.node_poll (node_id, polled_at, reachable, tunnels, stuck) values ($1, $2, true, $3, null)
     on conflict (node_id) do update set polled_at = excluded.polled_at, reachable = excluded.reachable, tunnels = excluded.tunnels, stuck = excluded.stuck`,
    [n.id, new Date(at).toISOString(), n.tunnels.length],
  );
}

/** Picks BUSY of a node's tunnels and moves their counters. */
function busyOf(n: Node): number[] {
  const k = Math.round(n.tunnels.length * BUSY);
  const start = Math.floor(Math.random() * n.tunnels.length);
  const out: number[] = [];
  for (let j = 0; j < k; j++) {
    const i = (start + j * 7) % n.tunnels.length;
    n.packets[i]! += 1 + Math.floor(Math.random() * 5000);
    out.push(i);
  }
  return [...new Set(out)];
}

/**
 * A COPY ... FROM STDIN of `data` on a pg client, as the protocol has it (the client sends the rows after the
 * server's CopyInResponse). The `pg` package has no COPY of its own; this is the smallest submittable that does it.
 */
function copyIn(client: pg.PoolClient | pg.Client, text: string, data: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let failed: Error | undefined;
    const q = {
      submit: (c: { query: (t: string) => void }) => c.query(text),
      handleCopyInResponse: (c: { sendCopyFromChunk: (b: Buffer) => void; endCopyFrom: () => void }) => {
        c.sendCopyFromChunk(Buffer.from(data));
        c.endCopyFrom();
      },
      handleCommandComplete: () => {},
      handleError: (e: Error) => {
        failed = e;
      },
      handleReadyForQuery: () => (failed ? reject(failed) : resolve()),
    };
    (client as unknown as { query: (q: unknown) => void }).query(q);
  });
}

const SEEN_UPSERT_SET = `on conflict (tunnel_id) do update set packets_in = excluded.packets_in, bytes_in = excluded.bytes_in, packets_out = excluded.packets_out,
  bytes_out = excluded.bytes_out, dropped = excluded.dropped, seen_at = excluded.seen_at, checked_at = excluded.checked_at`;

type Writer = (c: pg.PoolClient, rows: { id: string; p: number }[], at: string) => Promise<void>;

/** The four ways to write one node's seen rows (the same columns ingest.ts writes, its pending minute aside). */
const WRITERS: Record<string, Writer> = {
  json_one_statement: async (c, rows, at) => {
    await c.query(
      `insert into traffic.seen (tunnel_id, packets_in, bytes_in, packets_out, bytes_out, dropped, seen_at, checked_at)
       select id, pi, bi, po, bo, d, $1::timestamptz, $1::timestamptz from jsonb_to_recordset($2::jsonb) as x(id uuid, pi bigint, bi bigint, po bigint, bo bigint, d bigint[]) ${SEEN_UPSERT_SET}`,
      [at, JSON.stringify(rows.map((r) => ({ id: r.id, pi: r.p, bi: r.p * 900, po: r.p, bo: r.p * 700, d: [0, 0, 0, 0, 0] })))],
    );
  },
  arrays_one_statement: async (c, rows, at) => {
    await c.query(
      `insert into traffic.seen (tunnel_id, packets_in, bytes_in, packets_out, bytes_out, dropped, seen_at, checked_at)
       select id, pi, bi, po, bo, '{0,0,0,0,0}', $1::timestamptz, $1::timestamptz from unnest($2::uuid[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[]) as x(id, pi, bi, po, bo) ${SEEN_UPSERT_SET}`,
      [at, rows.map((r) => r.id), rows.map((r) => r.p), rows.map((r) => r.p * 900), rows.map((r) => r.p), rows.map((r) => r.p * 700)],
    );
  },
  copy_then_upsert: async (c, rows, at) => {
    await c.query('begin');
    await c.query(`create temp table if not exists seen_in (tunnel_id uuid, packets_in bigint, bytes_in bigint, packets_out bigint, bytes_out bigint) on commit delete rows`);
    await copyIn(c, 'copy seen_in from stdin', rows.map((r) => `${r.id}\t${r.p}\t${r.p * 900}\t${r.p}\t${r.p * 700}\n`).join(''));
    await c.query(
      `insert into traffic.seen (tunnel_id, packets_in, bytes_in, packets_out, bytes_out, dropped, seen_at, checked_at)
       select tunnel_id, packets_in, bytes_in, packets_out, bytes_out, '{0,0,0,0,0}', $1::timestamptz, $1::timestamptz from seen_in ${SEEN_UPSERT_SET}`,
      [at],
    );
    await c.query('commit');
  },
  statement_per_row: async (c, rows, at) => {
    await c.query('begin');
    for (const r of rows) {
      await c.query(
        `insert into traffic.seen (tunnel_id, packets_in, bytes_in, packets_out, bytes_out, dropped, seen_at, checked_at) values ($1, $2, $3, $4, $5, '{0,0,0,0,0}', $6, $6) ${SEEN_UPSERT_SET}`,
        [r.id, r.p, r.p * 900, r.p, r.p * 700, at],
      );
    }
    await c.query('commit');
  },
};

async function main(): Promise<void> {
  const adminUrl = process.env.BENCH_DATABASE_URL ?? ensureLocalPostgres();
  const { admin, dbName, url, db } = await createBenchDatabase('tg_bench_ingest', adminUrl);
  const pool = new pg.Pool({ connectionString: url, max: LANES });
  // The database is dropped with its connections at the end: an idle one ended by it is no failure.
  pool.on('error', () => {});
  const out: Record<string, unknown> = { bench: 'ingest', nodes: NODES, tunnels_per_node: TUNNELS, busy_share: BUSY, lanes: LANES, interval_s: INTERVAL_S };
  try {
    // The fleet: NODES nodes, TUNNELS active tunnels each (rows as purchases leave them).
    const setup = performance.now();
    const account = randomUUID();
    await pool.query(`insert into account (id, balance_usd) values ($1, 0)`, [account]);
    const nodes: Node[] = [];
    for (let k = 0; k < NODES; k++) {
      const id = randomUUID();
      await pool.query(`insert into edge_node (id, name, public_ip, ssh_host, host_key) values ($1, $2, '192.0.2.1', '127.0.0.1', 'SHA256:bench')`, [id, `bench-${k}`]);
      const rows = await pool.query<{ id: string }>(
        `insert into tunnel (id, account_id, node_id, protected_ip, origin_ip, tunnel_name, inner_index, gre_key, status, charged_usd, charged_rub)
         select gen_random_uuid(), $1, $2, '10.' || (g / 65536) || '.' || ((g / 256) % 256) || '.' || (g % 256), '8.8.8.8', 'tg-' || lpad(g::text, 10, '0'), i, i + 1, 'active', 1, 90
           from generate_series(1, $3::int) as i, lateral (select $4::int * $3::int + i as g) x returning id`,
        [account, id, TUNNELS, k],
      );
      nodes.push({ id, tunnels: rows.rows.map((r) => r.id), packets: rows.rows.map(() => 1000), seq: 0 });
    }
    await pool.query('vacuum analyze tunnel');
    out.setup_s = r1((performance.now() - setup) / 1000);
    const store = new TrafficStore(db);
    const ingest = new StatusIngest(db, store, { healthChangedAll: async () => {} }, { publish: async () => {} });
    let at = Date.now() - 20 * 60_000;
    await store.maintain(new Date(at));

    // Round 0: every node in full (every tunnel's first sighting, health set, cursor stored). Then one more
    // full round: what every round cost before answers by change (same rows, counters moved on the busy tenth).
    const first = await lanes(nodes, async (n) => void (await ingest.ingestStatus(n.id, answer(n, at, null), new Date(at))));
    at += INTERVAL_S * 1000;
    const full = await lanes(nodes, async (n) => {
      busyOf(n);
      await ingest.ingestStatus(n.id, answer(n, at, null), new Date(at));
      await notePoll(pool, n, at);
    });
    out.first_round_s = r2(first.wallMs / 1000);
    out.full_round = { wall_s: r2(full.wallMs / 1000), node_p50_ms: r1(pct(full.each, 50)), node_p99_ms: r1(pct(full.each, 99)), rows: NODES * TUNNELS };
    await pool.query('vacuum analyze traffic.seen');

    // Rounds by change.
    const change: { wall_s: number; node_p50_ms: number; node_p99_ms: number; rows: number; delta_forms: number }[] = [];
    for (let r = 0; r < CHANGE_ROUNDS; r++) {
      at += INTERVAL_S * 1000;
      let rows = 0;
      let deltas = 0;
      const res = await lanes(nodes, async (n) => {
        // As the collector does it: the stored cursor read, the answer to it ingested, the poll noted.
        const since = await ingest.cursorOf(n.id, new Date(at));
        const busy = busyOf(n);
        rows += busy.length;
        const o = await ingest.ingestStatus(n.id, since === null ? answer(n, at, null) : answer(n, at, busy), new Date(at));
        if (o.form === 'delta') deltas++;
        await notePoll(pool, n, at);
      });
      change.push({ wall_s: r2(res.wallMs / 1000), node_p50_ms: r1(pct(res.each, 50)), node_p99_ms: r1(pct(res.each, 99)), rows, delta_forms: deltas });
    }
    out.change_rounds = change;
    const changeWall = pct(change.map((c) => c.wall_s), 50);
    const changeRows = change[0]!.rows;

    // The ceiling: one bare COPY of a change round's rows (seen and minute rows) into plain tables with the same keys.
    const c = await pool.connect();
    let copyMs: number;
    try {
      await c.query(`create table plain_seen (tunnel_id uuid primary key, packets_in bigint, bytes_in bigint, packets_out bigint, bytes_out bigint, dropped bigint[], seen_at timestamptz, checked_at timestamptz)`);
      await c.query(`create table plain_minute (tunnel_id uuid, t timestamptz, packets_in bigint, bytes_in bigint, packets_out bigint, bytes_out bigint, dropped bigint[], primary key (tunnel_id, t))`);
      const t = new Date(at).toISOString();
      const picked = nodes.flatMap((n) => busyOf(n).map((i) => ({ id: n.tunnels[i]!, p: n.packets[i]! })));
      const seenText = picked.map((r) => `${r.id}\t${r.p}\t${r.p * 900}\t${r.p}\t${r.p * 700}\t{0,0,0,0,0}\t${t}\t${t}\n`).join('');
      const minuteText = picked.map((r) => `${r.id}\t${t}\t${r.p}\t${r.p * 900}\t${r.p}\t${r.p * 700}\t\\N\n`).join('');
      const s = performance.now();
      await c.query('begin');
      await copyIn(c, 'copy plain_seen from stdin', seenText);
      await copyIn(c, 'copy plain_minute from stdin', minuteText);
      await c.query('commit');
      copyMs = performance.now() - s;
      out.ceiling_bare_copy = { rows: picked.length * 2, ms: r1(copyMs) };
    } finally {
      c.release();
    }

    // How the rows go in: one change round's seen rows per node, four ways, over the same lanes, taking turns
    // (WRITE_REPEATS times each, the median kept) so that none is favoured by what the host does meanwhile.
    const writes: Record<string, { wall_s: number; node_p50_ms: number; rows_per_s: number }> = {};
    const samples: Record<string, { wallMs: number; each: number[]; rows: number }[]> = {};
    for (let rep = 0; rep < WRITE_REPEATS; rep++) {
      for (const [name, write] of Object.entries(WRITERS)) {
        at += 1000;
        const t = new Date(at).toISOString();
        let rows = 0;
        const res = await lanes(nodes, async (n) => {
          const busy = busyOf(n);
          rows += busy.length;
          const cl = await pool.connect();
          try {
            await write(cl, busy.map((i) => ({ id: n.tunnels[i]!, p: n.packets[i]! })), t);
          } finally {
            cl.release();
          }
        });
        (samples[name] ??= []).push({ ...res, rows });
      }
    }
    for (const [name, list] of Object.entries(samples)) {
      const mid = [...list].sort((a, b) => a.wallMs - b.wallMs)[Math.floor(list.length / 2)]!;
      writes[name] = { wall_s: +(mid.wallMs / 1000).toFixed(2), node_p50_ms: r1(pct(mid.each, 50)), rows_per_s: Math.round(mid.rows / (mid.wallMs / 1000)) };
    }
    out.seen_writes = writes;

    const fullWall = (out.full_round as { wall_s: number }).wall_s;
    out.summary = {
      change_round_s: changeWall,
      full_round_s: fullWall,
      change_over_full: +(changeWall / fullWall).toFixed(3),
      share_of_interval: +(changeWall / INTERVAL_S).toFixed(3),
      change_round_over_bare_copy: +((changeWall * 1000) / copyMs).toFixed(1),
      change_rows_per_s: Math.round(changeRows / changeWall),
    };
    console.log(JSON.stringify(out, null, 2));
    report({
      scenario: `status round by change, ${NODES} nodes x ${TUNNELS} tunnels, ${BUSY * 100}% busy`,
      rate: changeWall,
      unit: 's',
      ceiling: `bare COPY of the same ${changeRows * 2} rows (ms)`,
      ceiling_rate: r1(copyMs),
      ratio: +((changeWall * 1000) / copyMs).toFixed(1),
      target: `< ${INTERVAL_S} s`,
      pass: changeWall < INTERVAL_S,
      note: `full round (every tunnel, as before) ${fullWall} s; ${LANES} nodes at a time`,
    });
  } finally {
    await pool.end();
    await db.close();
    await admin.query(`drop database ${dbName} with (force)`);
    await admin.end();
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
