// At most one probe of a tunnel in flight, and one answer for everyone who asked meanwhile (a
// buyer hammering activate must not turn into a probe storm on the edge).
//
// In this process, callers while a probe runs get that probe's promise. Across replicas, the prober
// holds the tunnel's advisory lock (locks.ts, try-only) and publishes its answer over PostgreSQL NOTIFY
// (channel `tunnel_probe`, through Database.listen/notify); a replica that finds the lock taken waits
// for that notice instead of probing, and answers with it. Subscribing comes before trying the lock,
// and the holder publishes before it lets go, so a waiter cannot miss the answer, unless its LISTEN
// connection drops: then it tries the lock again rather than wait out its timeout. The embedded database
// is one process: the in-process sharing is the whole story there.
import { EventEmitter } from 'node:events';
import type { Database } from '../db/database.ts';
import type { ProbeResult } from '../../common/tunnel-spec.ts';
import { ApiError } from '../domain/errors.ts';
import type { KeyedLocks } from './locks.ts';

const PROBE_CHANNEL = 'tunnel_probe';

/**
 * The agent's answer and the origin it was about: `originRevision` is the tunnel's origin_revision the probe was
 * sent for, once the edge had applied it (applied_revision >= origin_revision), else null (the edge still held an
 * earlier origin's link, so the answer says nothing of the tunnel's origin). Activation commits only when it is
 * still the tunnel's origin_revision under the row lock (domain/tunnels/lifecycle.ts activate).
 */
export interface TunnelProbe extends ProbeResult {
  originRevision: number | null;
}
/** Raised on `notices` when this replica may have missed notices (tunnel ids are UUIDs: no clash). */
const MISSED = 'missed';

/** What the prober publishes: the agent's result, or why there is none (503 edge_unavailable). */
interface ProbeNotice {
  id: string;
  result?: TunnelProbe;
  unavailable?: string;
}

export class ProbeCoordinator {
  private readonly running = new Map<string, Promise<TunnelProbe>>();
  private readonly notices = new EventEmitter();
  private listening: Promise<void> | null = null;

  constructor(
    private readonly db: Database,
    private readonly locks: KeyedLocks,
    /** How long a replica waits for another one's answer: a probe's job timeout and a margin. */
    private readonly waitMs: number,
  ) {
    this.notices.setMaxListeners(0);
  }

  /** The probe of `tunnelId` (lower-case id), run by `probeNow` here or shared with whoever runs it. */
  probe(tunnelId: string, probeNow: () => Promise<TunnelProbe>): Promise<TunnelProbe> {
    const running = this.running.get(tunnelId);
    if (running) return running;
    const p = (this.db.url ? this.acrossReplicas(tunnelId, probeNow) : probeNow()).finally(() => this.running.delete(tunnelId));
    this.running.set(tunnelId, p);
    return p;
  }

  private async acrossReplicas(id: string, probeNow: () => Promise<TunnelProbe>): Promise<TunnelProbe> {
    await this.listen();
    let onNotice: (n: ProbeNotice) => void = () => {};
    let timer: NodeJS.Timeout | undefined;
    const notice = new Promise<ProbeNotice | null>((resolve) => {
      onNotice = resolve;
      timer = setTimeout(() => resolve(null), this.waitMs);
      timer.unref();
      this.notices.once(id, onNotice);
    });
    let onMissed: () => void = () => {};
    try {
      for (;;) {
        // Armed before trying the lock, like the notice itself.
        const missed = new Promise<'missed'>((resolve) => {
          onMissed = () => resolve('missed');
          this.notices.once(MISSED, onMissed);
        });
        const mine = await this.locks.tryLock(`probe:${id}`, async () => {
          try {
            const result = await probeNow();
            await this.publish({ id, result });
            return result;
          } catch (e) {
            if (e instanceof ApiError && e.code === 'edge_unavailable') await this.publish({ id, unavailable: e.message }).catch(() => {});
            throw e;
          }
        });
        if (mine.acquired) return mine.value;
        const n = await Promise.race([notice, missed]);
        this.notices.off(MISSED, onMissed);
        // This replica's LISTEN connection dropped: the answer may have been published unheard. Try the
        // lock again: free means the other probe is over and this replica probes; held, it waits again.
        if (n === 'missed') continue;
        if (n?.result) return n.result;
        throw new ApiError('edge_unavailable', n?.unavailable ?? 'Another probe of this tunnel did not finish in time; try again shortly.');
      }
    } finally {
      clearTimeout(timer);
      this.notices.off(id, onNotice);
      this.notices.off(MISSED, onMissed);
    }
  }

  private publish(n: ProbeNotice): Promise<void> {
    return this.db.notify(PROBE_CHANNEL, JSON.stringify(n));
  }

  private listen(): Promise<void> {
    this.listening ??= this.db
      .listen(PROBE_CHANNEL, (payload) => {
        try {
          const n = JSON.parse(payload) as ProbeNotice;
          if (typeof n.id === 'string') this.notices.emit(n.id, n);
        } catch {
          // Not ours; ignore.
        }
      }, () => this.notices.emit(MISSED))
      .catch((e: unknown) => {
        this.listening = null;
        throw e;
      });
    return this.listening;
  }
}
