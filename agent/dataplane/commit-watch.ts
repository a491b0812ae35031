// Which nftables commits since the agent's own last one touched its table. The generation id alone says only
// that somebody committed (any table: a firewall manager, fail2ban, docker, an `nft` by hand), and a reconcile
// that trusted nothing but the id read the whole table back after each such commit: 7.5-9 s and ~140 MB at
// 10,000 tunnels (docs/CONTRACTS.md "Dataplane", the reconcile's short cut).
//
// Between the agent's operations a socket listens to the kernel's ruleset notifications. For every commit the
// kernel sends one message per changed object, naming its table, then NEWGEN with the commit's generation id
// (agent/netlink/nftables/notification.ts). A later generation is as good as the agent's own when a NEWGEN was
// heard for every generation in between and no message named the table. Anything else (a generation not heard,
// a receive buffer that overflowed, a datagram that a process rather than the kernel sent, a message naming no
// table) proves nothing, and the caller reads the table back as before. The socket leaves the group while the agent commits: the kernel builds a notification per
// element for every listener, 800,000 of them for a first apply of 10,000 tunnels.
import { NETLINK_NETFILTER, type NlMsg } from '../netlink/message.ts';
import { decodeNotification, NFNLGRP_NFTABLES, type NftNotification } from '../netlink/nftables/notification.ts';
import { NetlinkSubscription, type DrainResult } from '../netlink/subscription.ts';

/** The generation after `gen` (the kernel's counter skips 0 when it wraps: nf_tables_commit). */
const after = (gen: number): number => (gen === 0xffffffff ? 1 : gen + 1);

/** What the notifications heard since `since` prove, for `table`. */
export type CommitVerdict =
  | { clean: true; generation: number }
  /** `by`: the process whose commit touched the table, as its NEWGEN names it (for the operator's log). */
  | { clean: false; why: 'overflow' | 'forged' | 'gap' | 'touched' | 'unnamed'; by?: { pid?: number; proc?: string } };

/**
 * Pure: the generation up to which every commit after `since` is heard and none touched `table`, given the
 * notifications in arrival order and the kernel's generation read before they were drained (`atLeast`: one
 * NEWGEN at or past it must be among them, so no commit before that read can still be missing).
 */
export function judgeCommits(since: number, heard: readonly NftNotification[], drained: DrainResult, table: string, atLeast: number): CommitVerdict {
  if (drained !== 'drained') return { clean: false, why: drained };
  let gen = since;
  for (const [i, n] of heard.entries()) {
    if (n.kind === 'generation') {
      if (n.genId !== after(gen)) return { clean: false, why: 'gap' };
      gen = n.genId;
    } else if (n.kind === 'change') {
      // Any family: a table of this name in another family is not ours, but telling them apart buys nothing.
      if (n.table === undefined) return { clean: false, why: 'unnamed' };
      if (n.table === table) {
        const end = heard.slice(i).find((x) => x.kind === 'generation');
        return { clean: false, why: 'touched', ...(end?.kind === 'generation' && (end.pid !== undefined || end.proc !== undefined) ? { by: { pid: end.pid, proc: end.proc } } : {}) };
      }
    }
  }
  // The kernel's id read before the drain must be among those heard (or be `since`): a commit's NEWGEN is sent after
  // its id moved, so an id not heard yet is a commit still under way, of which nothing is proven.
  if (ahead(since, atLeast) > ahead(since, gen)) return { clean: false, why: 'gap' };
  return { clean: true, generation: gen };
}

/** How many commits `gen` is past `since` (ids wrap, skipping 0). */
function ahead(since: number, gen: number): number {
  return gen >= since ? gen - since : 0xffffffff - since + gen;
}

export interface CommitWatchOptions {
  netns?: string;
  table: string;
  /** Told once when the watch cannot work here (no socket, no group): the agent then reads back as before. */
  unavailable?: (error: string) => void;
  /** Tests hand in their own subscription; by default a netfilter socket in `netns`. */
  open?: () => Subscription;
}

type Subscription = Pick<NetlinkSubscription, 'drain' | 'discard' | 'listen' | 'close'>;
const GROUPS = [NFNLGRP_NFTABLES];
/**
 * While watching, what was heard is judged this often, not only at the agent's next operation: the queue stays
 * short, and after a touch, a gap or an overflow the socket leaves the group at once. Every listener makes the
 * kernel build a notification per object of every other program's commit.
 */
const POLL_MS = 1_000;

export class CommitWatch {
  /** Opened at the first start, kept until close(): stop and start only leave and join the group (socket.ts). */
  private sub?: Subscription;
  /** The generation the subscription is known to have heard everything since; undefined: not watching. */
  private since?: number;
  /** Opening or joining failed once: never tried again (each reopen would cost a link deletion ~10 ms, socket.ts). */
  private unavailable = false;
  /** What ended the watch at a poll, told by the next cleanThrough. */
  private ended?: CommitVerdict;
  private timer?: ReturnType<typeof setInterval>;

  constructor(private readonly opts: CommitWatchOptions) {}

  /**
   * Starts listening from `generation`, the agent's own. `current` reads the kernel's generation: it must still be
   * `generation` once the socket listens, or a commit in between went unheard and the watch does not start.
   * A socket that cannot be opened or join (no CAP_NET_ADMIN) leaves the agent as it was without the watch.
   */
  async start(generation: number, current: () => Promise<number>): Promise<boolean> {
    this.stop();
    if (this.unavailable) return false;
    try {
      this.sub ??= this.opts.open ? this.opts.open() : NetlinkSubscription.open(NETLINK_NETFILTER, { netns: this.opts.netns });
      // What was queued before the last stop (an overflow too) belongs to an account already closed.
      this.sub.discard();
      this.sub.listen(GROUPS, true);
    } catch (e) {
      this.unavailable = true;
      this.close();
      this.opts.unavailable?.(e instanceof Error ? e.message : String(e));
      return false;
    }
    // The agent's own change is done and recorded by now: a failure to read the generation only leaves the watch off.
    const now = await current().catch(() => undefined);
    if (now !== generation) {
      this.stop();
      return false;
    }
    this.since = generation;
    this.timer ??= setInterval(() => this.poll(), POLL_MS).unref();
    return true;
  }

  /** Judges what was heard so far (the timer's work; tests call it): a watch that proves nothing more ends here. */
  poll(): void {
    if (this.since === undefined) return;
    const v = this.judge(this.since);
    if (v && !v.clean) this.ended = v;
  }

  /** Stops listening (before the agent's own commits). */
  stop(): void {
    this.since = undefined;
    this.ended = undefined;
    if (!this.sub) return;
    try {
      this.sub.listen(GROUPS, false);
    } catch {
      this.close();
    }
  }

  /** Closes the socket (the dataplane's close). */
  close(): void {
    this.since = undefined;
    clearInterval(this.timer);
    this.timer = undefined;
    this.sub?.close();
    this.sub = undefined;
  }

  /**
   * Reads what was heard: the generation up to which no commit touched the table (the kernel's `kernelGen` or
   * later), or undefined, which also ends the watch (what follows a lost notification proves nothing).
   */
  cleanThrough(kernelGen: number): CommitVerdict | undefined {
    if (this.since === undefined) {
      const ended = this.ended;
      this.ended = undefined;
      return ended;
    }
    return this.judge(kernelGen);
  }

  private judge(kernelGen: number): CommitVerdict | undefined {
    if (!this.sub || this.since === undefined) return undefined;
    const heard: NftNotification[] = [];
    let drained: DrainResult;
    try {
      drained = this.sub.drain((m: NlMsg) => heard.push(decodeNotification(m)));
    } catch {
      this.close();
      return undefined;
    }
    const v = judgeCommits(this.since, heard, drained, this.opts.table, kernelGen);
    if (v.clean) this.since = v.generation;
    else this.stop();
    return v;
  }
}
