// Reading tunnels: one (get), a page of them (list, with its shared-page cache), a tunnel's origin
// scripts (setup) and a tunnel's status changes as they happen (watch). Nothing here writes.
import type { Database } from '../../db/database.ts';
import { Coalescer } from '../../db/coalesce.ts';
import type { TunnelStatus } from '../../db/entities.ts';
import type { Health } from '../../../common/tunnel-status.ts';
import { AttackNotices, type StatusChange } from '../../provisioning/status-bus.ts';
import type { Principal } from '../../auth/principal.ts';
import { ApiError, notFound } from '../errors.ts';
import { IpError } from '../ip.ts';
import { renderOriginScripts, type OriginScripts } from '../origin-scripts.ts';
import { decodeCursor, encodeCursor, utcText } from './cursor.ts';
import { ourAddress } from './input.ts';
import type { EdgeDispatch } from './lifecycle.ts';
import { routeTableFor } from './naming.ts';
import { isUuid } from '../../../common/names.ts';
import { HEALTH_CHECKED_AT_SQL, readTunnel, SETTINGS_APPLIED, settingsApplied, shownHealth, tunnelView, type TunnelView } from './rows.ts';
import { settingsOf } from './settings.ts';
import { SETTINGS_COLUMNS, tunnelSpecOf } from './spec.ts';
import type { Protocol } from '../../../common/tunnel-policy.ts';

export interface TunnelPage {
  tunnels: TunnelView[];
  next_cursor: string | null;
}

export interface ListOptions {
  limit?: number;
  cursor?: string | null;
}

export interface SetupView {
  tunnel_id: string;
  scripts: OriginScripts;
}

/**
 * A list row: id, name, protected_ip, origin_ip, tunnel_name, status, created_at, updated_at (UTC text),
 * edge_ip, then the settings (ports, protocol, syn_proxy, source_pps_limit, drop_fragments, max_flows, alert_pps), then health
 * and health_checked_at (UTC text or null), then the spec revision and the applied one.
 */
type ListRow = [string, string | null, string, string, string, TunnelStatus, string, string, string, string, Protocol, boolean, number | null, boolean, number, number | null, Health, string | null, number, number];

/**
 * One list request's page: whose (the account's, or that of the account an API key belongs to), how many
 * (the page's limit), after which position (a decoded cursor).
 */
interface ListAsk {
  owner: { accountId: string } | { keyId: string };
  limit: number;
  after: { createdAt: string; id: string } | null;
}

// Only the columns a view shows, each row as an array, times as PostgreSQL's plain text output:
// to_char() cost the database more than the rest of this query (measured), so the reshaping to
// ISO 8601 happens here (utcText), with the same millisecond truncation as rows.ts's columns.
const LIST_COLUMNS = `t.id, t.name, t.protected_ip, t.origin_ip, t.tunnel_name, t.status,
       (t.created_at at time zone 'UTC')::text, (t.updated_at at time zone 'UTC')::text, n.public_ip,
       ${SETTINGS_COLUMNS}, t.health, (${HEALTH_CHECKED_AT_SQL} at time zone 'UTC')::text,
       t.spec_revision, t.applied_revision`;
/** One account's page, `limit + 1` rows (the extra one tells whether there is a next page). */
const PAGE_OF = (account: string, after: string, limit: string) => `
  from tunnel t join edge_node n on n.id = t.node_id
 where t.account_id = ${account} and t.status <> 'deleted'${after}
 order by t.created_at desc, t.id desc limit ${limit}`;

/**
 * The rows of each ask's page, one statement for the whole batch on PostgreSQL: the asks unnested, each
 * page read by the same index scan a lone list makes (tunnel_account_created_idx), in a lateral join.
 * Identical asks in a batch are read once and answered with the same rows.
 */
async function readPageRows(db: Database, asks: ListAsk[]): Promise<ListRow[][]> {
  const keyOf = (a: ListAsk) => `${'keyId' in a.owner ? `k${a.owner.keyId}` : a.owner.accountId}\u0000${a.limit}\u0000${a.after?.createdAt ?? ''}\u0000${a.after?.id ?? ''}`;
  const slot = new Map<string, number>();
  const distinct: ListAsk[] = [];
  const which = asks.map((a) => {
    const k = keyOf(a);
    let i = slot.get(k);
    if (i === undefined) slot.set(k, (i = distinct.push(a) - 1));
    return i;
  });
  let pages: ListRow[][];
  if (!db.url) {
    // The embedded database has one session and no round trips to save: one plain statement per page.
    pages = await Promise.all(
      distinct.map(async (a) => {
        const byKey = 'keyId' in a.owner;
        const params: unknown[] = ['keyId' in a.owner ? a.owner.keyId : a.owner.accountId, ...(a.after ? [a.after.createdAt, a.after.id] : []), a.limit + 1];
        const after = a.after ? ' and (t.created_at, t.id) < (?::timestamptz, ?::uuid)' : '';
        const owner = byKey ? '(select account_id from api_key where id = ?::uuid)' : '?';
        return (await db.hotRows(`tunnel_list_rows${byKey ? '_by_key' : ''}${a.after ? '_after' : ''}`, `select ${LIST_COLUMNS} ${PAGE_OF(owner, after, '?')}`, params)) as ListRow[];
      }),
    );
  } else {
    // No cursor reads from the top: (infinity, the greatest uuid) is after every row, and the row
    // comparison stays an index condition, so a deep page costs what the first does.
    const rows = await db.hotRows(
      'tunnel_list_pages',
      `select i.n, p.* from unnest(?::uuid[], ?::uuid[], ?::int[], ?::timestamptz[], ?::uuid[]) with ordinality as i(account_id, key_id, lim, after_at, after_id, n)
         left join api_key k on k.id = i.key_id
         cross join lateral (select t.created_at as sort_at, ${LIST_COLUMNS} ${PAGE_OF(
           'coalesce(i.account_id, k.account_id)',
          ` and (t.created_at, t.id) < (coalesce(i.after_at, 'infinity'), coalesce(i.after_id, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))`,
           'i.lim',
         )}) p
        order by i.n, p.sort_at desc, p.id desc`,
      [
        distinct.map((a) => ('accountId' in a.owner ? a.owner.accountId : null)),
        distinct.map((a) => ('keyId' in a.owner ? a.owner.keyId : null)),
        distinct.map((a) => a.limit + 1),         distinct.map((a) => a.after?.createdAt ?? null),
        distinct.map((a) => a.after?.id ?? null),
      ],
    );
    pages = distinct.map(() => []);
    // Each row: its ask's ordinal, the sort key, then the ListRow's columns.
    for (const r of rows) pages[Number(r[0]) - 1]!.push(r.slice(2) as ListRow);
  }
  return which.map((i) => pages[i]!);
}

export class TunnelQueries {
  /** Pages built from rows that concurrent identical lists shared (readPageRows); see list(). */
  private readonly pages = new WeakMap<ListRow[], TunnelPage>();
  /**
   * Concurrent lists, of any accounts, leave together as one statement (server/db/coalesce.ts): under
   * load a page costs a share of a round trip instead of a pooled connection's whole one, which is what
   * bounded the list (measured: the gateway sat idle waiting on the database). Each ask is still answered
   * by a statement sent after it was made, so it sees every commit from before the request.
   */
  private readonly pageRows: Coalescer<ListAsk, ListRow[]>;

  constructor(
    private readonly db: Database,
    private readonly edge: EdgeDispatch,
    private readonly adminSshPort: number,
  ) {
    this.pageRows = new Coalescer((asks) => readPageRows(db, asks), 2);
  }

  async get(principal: Principal, id: string): Promise<TunnelView> {
    return tunnelView(await readTunnel(this.db, principal, id), this.adminSshPort);
  }

  /** Newest first; deleted tunnels are left out. The cursor is opaque to clients (cursor.ts). */
  list(principal: Principal, opts: ListOptions = {}): Promise<TunnelPage> {
    return this.page({ accountId: principal.accountId }, opts);
  }

  /**
   * The page list() would give the holder of API key `keyId`, read without knowing its account yet: for a
   * caller whose key is being checked at the same time (server/http/rest/routes.ts prefetchList). It
   * proves nothing about the key: use it only once the key has been verified as this request's credential.
   */
  listByKey(keyId: string, opts: ListOptions = {}): Promise<TunnelPage> {
    return this.page({ keyId }, opts);
  }

  private async page(owner: ListAsk['owner'], opts: ListOptions): Promise<TunnelPage> {
    const limit = opts.limit ?? 20;
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw new ApiError('invalid_request', 'limit must be an integer from 1 to 100.');
    const rows = await this.pageRows.call({ owner, limit, after: opts.cursor ? decodeCursor(opts.cursor) : null });
    // Callers that shared the rows (identical asks in one batch) share the page built from them too
    // (callers must not modify it).
    let page = this.pages.get(rows);
    if (!page) this.pages.set(rows, (page = this.listPage(rows, limit)));
    return page;
  }

  private listPage(rows: ListRow[], limit: number): TunnelPage {
    const n = Math.min(rows.length, limit);
    const tunnels: TunnelView[] = new Array(n);
    for (let i = 0; i < n; i++) {
      const r = rows[i]!;
      tunnels[i] = {
        id: r[0],
        name: r[1],
        protected_ip: r[2],
        origin_ip: r[3],
        ...settingsOf({ ports: r[9], protocol: r[10], syn_proxy: r[11], source_pps_limit: r[12], drop_fragments: r[13], max_flows: r[14], alert_pps: r[15] }),
        tunnel_name: r[4],
        status: r[5],
        health: shownHealth(r[5], r[16]),
        health_checked_at: r[17] === null ? null : utcText(r[17]).millis,
        admin_ssh_port: this.adminSshPort,
        edge_ip: r[8],
        created_at: utcText(r[6]).millis,
        updated_at: utcText(r[7]).millis,
        [SETTINGS_APPLIED]: settingsApplied(r[5], r[18], r[19]),
      };
    }
    const last = rows.length > limit ? rows[limit - 1] : undefined;
    return { tunnels, next_cursor: last ? encodeCursor(utcText(last[6]).micros, last[0]) : null };
  }

  /** The origin scripts, filled from the same spec the edge job carries (spec.ts). */
  async setup(principal: Principal, id: string): Promise<SetupView> {
    const r = await readTunnel(this.db, principal, id);
    if (r.status === 'deleted' || r.status === 'deleting') {
      throw new ApiError('invalid_state', `Tunnel ${id} is ${r.status}; it has no setup scripts.`);
    }
    // Stored data from before these checks existed (an origin that is one of our addresses, an inner
    // number outside the pool) is the tunnel's state, not a server fault: invalid_state with what to do.
    const ours = await ourAddress(this.db, r.origin_ip);
    if (ours) {
      throw new ApiError('invalid_state', `Tunnel ${r.id}: its origin_ip ${r.origin_ip} is ${ours}, not an origin server; delete this tunnel and buy one with your origin's address.`);
    }
    let scripts: OriginScripts;
    try {
      const spec = tunnelSpecOf(r);
      scripts = renderOriginScripts({
        tunnelId: spec.id,
        tunnelName: spec.tunnel_name,
        protectedIp: spec.protected_ip,
        originIp: spec.origin_ip,
        edgeIp: spec.edge_ip,
        edgeInner: spec.edge_inner,
        originInner: spec.origin_inner,
        mtu: spec.mtu,
        greKey: spec.gre_key ?? null,
        routeTable: routeTableFor(spec.origin_inner),
      });
    } catch (e) {
      // renderOriginScripts refuses bad values with a TypeError naming the field ("origin script: ...").
      if (!(e instanceof IpError || (e instanceof TypeError && e.message.startsWith('origin script:')))) throw e;
      throw new ApiError('invalid_state', `Tunnel ${r.id} cannot have origin scripts as stored (${e.message}); delete it and buy another.`);
    }
    return { tunnel_id: r.id, scripts };
  }

  /**
   * The tunnel now, then again each time its status or health changes (from any replica), until it is deleted or
   * the consumer stops. Access is checked once, up front, like get().
   *
   * The consumer stops with return() (graphql-ws calls it when a subscription completes or its socket
   * closes), which ends it at once (abortable).
   */
  watch(principal: Principal, id: string): TunnelWatch {
    return abortable((signal) => this.watching(principal, id, signal));
  }

  /**
   * Changes of any of `ids` (this account's tunnels, at most WATCH_MANY_MAX), as they come: each time one
   * of them changes status or health, or an attack on it starts or ends, that tunnel now. Unlike watch() it sends no first snapshot: the
   * caller has just read the list it follows (the panel's dashboard, which shows more tunnels than a
   * socket may hold subscriptions). Access is checked once, up front, for every id: one id that is not
   * this account's makes the whole call not_found. A deleted tunnel stops being followed after its
   * `deleted` change; the call ends when none is left.
   */
  async watchMany(principal: Principal, ids: readonly string[]): Promise<TunnelWatch> {
    const wanted = [...new Set(ids.map((id) => id.toLowerCase()))];
    if (wanted.length === 0 || wanted.length > WATCH_MANY_MAX) throw new ApiError('invalid_request', `ids must hold 1 to ${WATCH_MANY_MAX} tunnel ids.`);
    if (!wanted.every((id) => isUuid(id))) throw notFound();
    const rows = await this.db.query<{ id: string; status: TunnelStatus; health: Health }>(
      'select id, status, health from tunnel where account_id = ? and id = any(?::uuid[])',
      [principal.accountId, `{${wanted.join(',')}}`],
    );
    if (rows.length !== wanted.length) throw notFound();
    const last = new Map(rows.map((r) => [r.id, { status: r.status, health: shownHealth(r.status, r.health) }]));
    return abortable((signal) => this.watchingMany(principal, last, signal));
  }

  private async *watchingMany(principal: Principal, last: Map<string, { status: TunnelStatus; health: Health }>, signal: AbortSignal): AsyncGenerator<TunnelView, undefined> {
    if (signal.aborted) return undefined;
    await this.edge.bus.start();
    const changed = new Set<string>();
    /** Tunnels an attack started or ended on since the last pass: they are sent whatever else changed. */
    const attacked = new Set<string>();
    const notices = new AttackNotices();
    let resync = false;
    let wake: (() => void) | null = null;
    const offs = [...last.keys()].map((id) =>
      this.edge.bus.on(id, (c) => {
        changed.add(id);
        if (notices.fresh(c.attack)) attacked.add(id);
        wake?.();
      }),
    );
    // Notices may have been missed: every followed tunnel is read again.
    offs.push(
      this.edge.bus.onResync(() => {
        resync = true;
        wake?.();
      }),
    );
    const onAbort = () => wake?.();
    signal.addEventListener('abort', onAbort);
    try {
      while (last.size > 0 && !signal.aborted) {
        if (changed.size === 0 && !resync) await new Promise<void>((r) => (wake = r));
        wake = null;
        if (signal.aborted) break;
        const ids = resync ? [...last.keys()] : [...changed];
        resync = false;
        changed.clear();
        for (const id of ids) {
          const before = last.get(id);
          if (!before) continue;
          // The row, not the notice, is the truth: several notices may have come while this loop was busy.
          const now = await this.get(principal, id);
          if (now.status === 'deleted') last.delete(id);
          else last.set(id, { status: now.status, health: now.health });
          const attack = attacked.delete(id);
          if (attack || now.status !== before.status || now.health !== before.health) yield now;
        }
      }
    } finally {
      signal.removeEventListener('abort', onAbort);
      for (const off of offs) off();
    }
    return undefined;
  }

  private async *watching(principal: Principal, id: string, signal: AbortSignal): AsyncGenerator<TunnelView, undefined> {
    if (signal.aborted) return undefined;
    await this.edge.bus.start();
    const pending: StatusChange[] = [];
    const notices = new AttackNotices();
    let resync = false;
    let wake: (() => void) | null = null;
    // Subscribe before the first read, so a change between the two is not lost.
    const off = this.edge.bus.on(id.toLowerCase(), (c) => {
      pending.push(c);
      wake?.();
    });
    // Notices may have been missed (this replica's LISTEN connection dropped): read the row again.
    const offResync = this.edge.bus.onResync(() => {
      resync = true;
      wake?.();
    });
    const onAbort = () => wake?.();
    signal.addEventListener('abort', onAbort);
    try {
      let last = await this.get(principal, id);
      yield last;
      while (last.status !== 'deleted' && !signal.aborted) {
        if (pending.length === 0 && !resync) await new Promise<void>((r) => (wake = r));
        wake = null;
        if (signal.aborted) break;
        // Every change in the order it happened, even when two came before this loop woke up: the row
        // is read fresh for the other fields, the status is the one each notice announced. After a
        // resync the row's own status comes last: it is at least as new as any notice.
        const fresh = await this.get(principal, id);
        if (resync) {
          resync = false;
          pending.push({ id: fresh.id, status: fresh.status, health: fresh.health });
        }
        // A health change (server/health/ingest.ts) is a change too, and so is the edge applying the
        // current settings (transitions.ts applied() publishes it), and an attack's start or end
        // (server/attacks/ingest.ts; the subscriber reads Tunnel.attacks): the subscription fires on them.
        for (const c of pending.splice(0)) {
          const health = c.health ?? fresh.health;
          if (!notices.fresh(c.attack) && c.status === last.status && health === last.health && fresh[SETTINGS_APPLIED] === last[SETTINGS_APPLIED]) continue;
          last = { ...fresh, status: c.status, health };
          yield last;
        }
      }
    } finally {
      signal.removeEventListener('abort', onAbort);
      off();
      offResync();
    }
    return undefined;
  }
}

/** How many tunnels one watchMany() may follow: the panel's dashboard shows them 50 at a time. */
export const WATCH_MANY_MAX = 500;

/**
 * An async iterator over `start`'s generator whose return() ends it at once. An async generator queues a
 * return() that arrives while it is suspended at an await until its next yield, and an idle tunnel never
 * yields again: its bus listeners and the generator would stay for good. So return() aborts the wait
 * first; the generator wakes, leaves its loop and unsubscribes at once.
 */
function abortable(start: (signal: AbortSignal) => AsyncGenerator<TunnelView, undefined>): TunnelWatch {
  const abort = new AbortController();
  const gen = start(abort.signal);
  const watch: TunnelWatch = {
    next: () => gen.next(),
    return: (value?: undefined) => {
      abort.abort();
      return gen.return(value);
    },
    throw: (e?: unknown) => {
      abort.abort();
      return gen.throw(e);
    },
    [Symbol.asyncIterator]: () => watch,
  };
  return watch;
}

/** A tunnel's status changes as they come (TunnelQueries.watch); return() ends it at once. */
export interface TunnelWatch extends AsyncIterableIterator<TunnelView, undefined> {
  next(): Promise<IteratorResult<TunnelView, undefined>>;
  return(value?: undefined): Promise<IteratorResult<TunnelView, undefined>>;
  throw(e?: unknown): Promise<IteratorResult<TunnelView, undefined>>;
}
