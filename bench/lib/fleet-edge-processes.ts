// The fleet's edge processes (bench/lib/fleet-edges.ts, many edges each) and what their answers tell: when each
// edge answered which job, so the bench can time a job from the API call to the agent's answer.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { ROOT } from './process.ts';

/** How long a job's answer may take before the bench gives up on it (a hang becomes a failure). */
export const ANSWER_BOUND_MS = 120_000;
const NODE_BIN = process.execPath;

export interface EdgeEvent {
  call?: 'apply' | 'remove' | 'reconcile';
  node?: string;
  ids?: string[];
  at?: number;
  status?: number;
  req?: number;
  ans?: number;
}

export class EdgeAnswers {
  /** Apply/remove answers by tunnel id. */
  private readonly byTunnel = new Map<string, { op: string; at: number }[]>();
  private readonly waiters = new Map<string, (() => void)[]>();
  readonly reconciled = new Set<string>();
  readonly statusOps: { req: number; ans: number }[] = [];
  reconciles = 0;

  take(e: EdgeEvent): void {
    if (e.status !== undefined) {
      this.statusOps.push({ req: e.req!, ans: e.ans! });
      return;
    }
    if (e.call === 'reconcile') {
      this.reconciles++;
      this.reconciled.add(e.node!);
      return;
    }
    if (!e.call || !e.ids) return;
    for (const id of e.ids) {
      const list = this.byTunnel.get(id) ?? [];
      list.push({ op: e.call, at: e.at! });
      this.byTunnel.set(id, list);
      for (const w of this.waiters.get(id)?.splice(0) ?? []) w();
    }
  }

  /** The agent's first answer of `op` for tunnel `id` after `since` (epoch ms), or null past the bound. */
  async answer(id: string, op: 'apply' | 'remove', since: number): Promise<number | null> {
    const deadline = Date.now() + ANSWER_BOUND_MS;
    for (;;) {
      const hit = this.byTunnel.get(id)?.find((a) => a.op === op && a.at >= since);
      if (hit) return hit.at;
      const left = deadline - Date.now();
      if (left <= 0) return null;
      await new Promise<void>((r) => {
        const t = setTimeout(r, Math.min(left, 1000));
        const list = this.waiters.get(id) ?? [];
        list.push(() => {
          clearTimeout(t);
          r();
        });
        this.waiters.set(id, list);
      });
    }
  }
}

export function startEdgeProcess(specFile: string, answers: EdgeAnswers): Promise<ChildProcess> {
  const child = spawn(NODE_BIN, ['--enable-source-maps', '--import', './loader/register.mjs', 'bench/lib/fleet-edges.ts'], {
    cwd: ROOT,
    env: { ...process.env, TG_FLEET_EDGES_FILE: specFile },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-8000)));
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`fleet edge process exited (${code}) before it was ready: ${stderr}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      let o: EdgeEvent & { ready?: boolean };
      try {
        o = JSON.parse(line) as EdgeEvent & { ready?: boolean };
      } catch {
        return;
      }
      if (o.ready) return resolve(child);
      answers.take(o);
    });
  });
}

