// Runs one job read from the SSH channel: verify (agent/jobs/verify.ts), then the dataplane, and turns
// the outcome into the single result line of docs/CONTRACTS.md "Results". Every refusal is logged with its code
// before anything touches the kernel. Changing jobs (apply, remove, reconcile) run one at a time; a probe
// changes nothing and waits on the network, so it does not hold them up.
//
// Errors from the dataplane: a tunnel it finds unusable before touching the kernel (InvalidTunnel, e.g. a
// tunnel_name without the agent's link prefix) is `malformed`; anything else is `kernel_error`.
import { KernelError, type ChangeCounts, type Dataplane, type ProbeResult, type ReconcileResult, type TunnelFailure } from '../dataplane/types.ts';
import type { JobErrorCode, OkResult, ResultLine } from '../../common/job-contract.ts';
import { checkStatusResult, type StatusCursor, type StatusResult } from '../../common/tunnel-status.ts';
import type { TrafficResult } from '../../common/traffic-live.ts';
import { verifyJob, type VerifiedJob, type VerifyContext } from './verify.ts';
import { InvalidTunnel } from '../dataplane/validate.ts';

/**
 * A verified `events` job (docs/CONTRACTS.md "Events stream"): no result line; the SSH server keeps the channel
 * open and writes the hub's lines to it (agent/events/hub.ts) until it closes.
 */
export interface EventsStream {
  kind: 'events';
  jti: string;
  /** Starts writing lines with `write`; the returned function stops it (the channel closed). */
  subscribe(write: (line: string) => boolean): () => void;
}

/** Where the `events` op's lines come from (agent/events/hub.ts EventHub fits). */
export interface EventSource {
  subscribe(write: (line: string) => boolean): () => void;
}

/** The slice of a structured logger this module needs (common/log.ts's Logger fits). */
export interface JobLog {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/** How long a kernel error text may be in the result line. */
const MAX_DESCRIPTION = 1000;

const count = (n: unknown): number => (typeof n === 'number' && Number.isInteger(n) && n >= 0 ? n : 0);

function counts(c: ChangeCounts): ChangeCounts {
  return { added: count(c?.added), changed: count(c?.changed), removed: count(c?.removed), unchanged: count(c?.unchanged) };
}

/**
 * A reconcile's result line (one broken tunnel must not block its node; contract agreed with the gateway): the four counts and
 * `failed`, always present, one `{id, error: "kernel_error", error_description}` per tunnel the kernel refused.
 */
function reconcileResult(r: ReconcileResult): ReconcileResult {
  const failed: TunnelFailure[] = [];
  for (const f of Array.isArray(r?.failed) ? r.failed : []) {
    if (typeof f?.id !== 'string') continue;
    failed.push({ id: f.id, error: 'kernel_error', error_description: String(f.error_description ?? '').slice(0, MAX_DESCRIPTION) });
  }
  return { ...counts(r), failed };
}

function probeResult(p: ProbeResult): ProbeResult {
  const out: ProbeResult = { reachable: p?.reachable === true };
  if (typeof p?.rtt_ms === 'number' && Number.isFinite(p.rtt_ms) && p.rtt_ms >= 0) out.rtt_ms = p.rtt_ms;
  return out;
}


export function exitCodeFor(line: ResultLine): 0 | 1 {
  return line.ok ? 0 : 1;
}

export class JobHandler {
  private inFlight = 0;
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly ctx: VerifyContext,
    private readonly dataplane: Dataplane,
    private readonly log: JobLog,
    /** The status op's answer (agent/health/status.ts); an agent built without one answers status with kernel_error. */
    private readonly status?: (since?: StatusCursor | null) => Promise<StatusResult>,
    /** The traffic op's answer (agent/traffic/ring.ts answer); without it the agent answers traffic with kernel_error. */
    private readonly traffic?: (ids: readonly string[], sinceS?: number) => TrafficResult,
    /** The `events` op's lines; an agent built without one answers events with kernel_error. */
    private readonly events?: EventSource,
  ) {}

  /** A refusal decided outside the verifier (the SSH layer: another command, oversize input); logged here. */
  refuse(error: JobErrorCode, error_description: string, fields: Record<string, unknown> = {}, jti?: string): ResultLine {
    this.log.warn('job refused', { code: error, reason: error_description, ...(jti ? { jti } : {}), ...fields });
    return jti ? { ok: false, jti, error, error_description } : { ok: false, error, error_description };
  }

  /** Verifies and runs one job; never throws. `fields` (e.g. the peer address) go into the log lines. */
  async handle(input: string | Uint8Array, fields: Record<string, unknown> = {}): Promise<ResultLine> {
    const r = await this.handleExec(input, fields);
    if (!('kind' in r)) return r;
    // Only the SSH server, which has a channel to keep open, can take a stream.
    return { ok: false, jti: r.jti, error: 'kernel_error', error_description: 'op events is a stream: it runs only on an SSH channel' };
  }

  /**
   * As handle(), for the SSH server: a verified `events` job comes back as its stream (no result line), any other
   * job as its result line. The verification is the same for every op: audience, expiry and replay included.
   */
  async handleExec(input: string | Uint8Array, fields: Record<string, unknown> = {}): Promise<ResultLine | EventsStream> {
    this.inFlight++;
    try {
      let outcome;
      try {
        outcome = await verifyJob(input, this.ctx);
      } catch (e) {
        // The replay cache could not record the jti: refuse rather than run a job a restart could replay.
        this.log.error('job refused: replay cache write failed', { ...fields, err: e });
        return { ok: false, error: 'kernel_error', error_description: `the agent could not record the job id: ${(e as Error).message}` };
      }
      if (!outcome.ok) return this.refuse(outcome.error, outcome.error_description, fields, outcome.jti);
      const job = outcome.job;
      if (job.op === 'events') {
        const source = this.events;
        if (!source) return { ok: false, jti: job.jti, error: 'kernel_error', error_description: 'this agent has no events stream (it was started without health checks)' };
        // Logged once here, and once by the SSH server when the channel closes: a stream lasts hours.
        this.log.info('events stream opened', { ...fields, jti: job.jti, op: job.op, v: job.v });
        return { kind: 'events', jti: job.jti, subscribe: (write) => source.subscribe(write) };
      }
      // Changing jobs run one at a time in the dataplane's own queue (housekeeping/serial-queue.ts).
      return await this.run(job, fields);
    } finally {
      if (--this.inFlight === 0) for (const w of this.idleWaiters.splice(0)) w();
    }
  }

  /** Resolves when no job is being handled (for a graceful shutdown). */
  idle(): Promise<void> {
    return this.inFlight === 0 ? Promise.resolve() : new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private async run(job: Exclude<VerifiedJob, { op: 'events' }>, fields: Record<string, unknown>): Promise<ResultLine> {
    const { jti, op, v } = job;
    const started = performance.now();
    const tunnelId = job.op === 'reconcile' || job.op === 'status' || job.op === 'traffic' ? undefined : job.tunnel.id;
    // `v`: which job version the gateway sent (a rolling upgrade is visible in the agent's log).
    const logFields = { ...fields, jti, op, v, ...(tunnelId ? { tunnel_id: tunnelId } : { tunnels: job.op === 'reconcile' ? job.tunnels.length : job.op === 'traffic' ? job.ids.length : 0 }) };
    try {
      let result: OkResult;
      switch (job.op) {
        case 'apply':
          result = counts(await this.dataplane.apply(job.tunnel));
          break;
        case 'remove':
          result = counts(await this.dataplane.remove(job.tunnel));
          break;
        case 'reconcile': {
          const r = reconcileResult(await this.dataplane.reconcile(job.tunnels));
          result = r;
          for (const f of r.failed) this.log.warn('tunnel failed in reconcile', { ...fields, jti, op, tunnel_id: f.id, code: f.error, reason: f.error_description });
          break;
        }
        case 'probe':
          if (!(await this.dataplane.has(job.tunnel.id))) {
            return this.refuse('unknown_tunnel', `this node has no tunnel ${job.tunnel.id}`, logFields, jti);
          }
          result = probeResult(await this.dataplane.probe(job.tunnel));
          break;
        case 'status': {
          if (!this.status) throw new KernelError('this agent keeps no status (it was started without health checks)');
          const r = await this.status(job.since);
          // The shape both ends check (common/tunnel-status.ts): never answer what the gateway would refuse.
          const why = checkStatusResult(r);
          if (why) throw new KernelError(`status result: ${why}`);
          // Logged as a count: the whole result is one line per tunnel, too much for a log line at 10,000.
          this.log.info('job done', { ...logFields, tunnels: r.tunnels.length, ...(r.delta ? { full: r.delta.full } : {}), ms: Math.round(performance.now() - started) });
          return { ok: true, jti, op, result: r };
        }
        case 'traffic': {
          if (!this.traffic) throw new KernelError('this agent keeps no live traffic (it was started without health checks)');
          const r = this.traffic(job.ids, job.since === undefined ? undefined : Date.parse(job.since) / 1000);
          // Counted, not listed: the gateway asks once a second while someone watches (docs/CONTRACTS.md "Live traffic").
          this.log.info('job done', { ...logFields, points: r.tunnels.reduce((n, t) => n + t.points.length, 0), ms: Math.round(performance.now() - started) });
          return { ok: true, jti, op, result: r };
        }
      }
      this.log.info('job done', { ...logFields, result, ms: Math.round(performance.now() - started) });
      return { ok: true, jti, op, result };
    } catch (e) {
      const err = e as Error & { cause?: unknown };
      // The dataplane wraps what it refuses in a KernelError whose cause is the InvalidTunnel.
      const invalid = e instanceof InvalidTunnel ? e : err?.cause instanceof InvalidTunnel ? err.cause : undefined;
      if (invalid) {
        const inner = invalid;
        return this.refuse('malformed', `the dataplane refused the tunnel: ${inner.message}`.slice(0, MAX_DESCRIPTION), logFields, jti);
      }
      const text = `${err instanceof KernelError ? '' : `${err?.name ?? 'Error'}: `}${err?.message ?? String(e)}`;
      this.log.error('job failed', { ...logFields, code: 'kernel_error', err: e });
      return { ok: false, jti, error: 'kernel_error', error_description: text.slice(0, MAX_DESCRIPTION) };
    }
  }
}
