// The fleet's load: REST clients buying, provisioning, changing and deleting tunnels.
import { epochMs } from './fleet-standin-dataplane.ts';
import { EdgeAnswers } from './fleet-edge-processes.ts';
import { ipOf } from './fleet-seed.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface Api {
  (method: string, path: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }>;
}

export function apiOn(url: string, key: string): Api {
  return async (method, path, body) => {
    const res = await fetch(url + path, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    let parsed: Record<string, unknown> = {};
    try {
      parsed = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    } catch {
      parsed = { text };
    }
    return { status: res.status, body: parsed };
  };
}

export interface LoadOutcome {
  latencies: { provision: number[]; patch: number[]; delete: number[] };
  jobs: number;
  unanswered: number;
  refused: Record<string, number>;
  purchases: number;
}

export async function runLoad(apis: Api[], answers: EdgeAnswers, seconds: number, clients: number): Promise<LoadOutcome> {
  const out: LoadOutcome = { latencies: { provision: [], patch: [], delete: [] }, jobs: 0, unanswered: 0, refused: {}, purchases: 0 };
  const refuse = (what: string, status: number) => {
    const k = `${what} ${status}`;
    out.refused[k] = (out.refused[k] ?? 0) + 1;
  };
  const end = Date.now() + seconds * 1000;
  /** A job's latency: the API call's start to the agent's answer for the tunnel, whichever answer the API gave. */
  const job = async (kind: keyof LoadOutcome['latencies'], op: 'apply' | 'remove', id: string, call: () => Promise<{ status: number }>): Promise<boolean> => {
    const t0 = epochMs();
    const r = await call();
    if (r.status !== 200 && r.status !== 202) {
      refuse(kind, r.status);
      return false;
    }
    out.jobs++;
    const at = await answers.answer(id, op, t0);
    if (at === null) {
      out.unanswered++;
      return false;
    }
    out.latencies[kind].push(at - t0);
    return true;
  };
  let seq = 0;
  const client = async (c: number) => {
    // Each client alternates replicas, as a load balancer in front of both would.
    for (let i = 0; Date.now() < end; i++) {
      const api = apis[(c + i) % apis.length]!;
      const bought = await api('POST', '/api/dedicated', { name: `load-${c}-${seq++}`, origin_ip: ipOf((101 << 24) + (seq % 0xffffff)) });
      if (bought.status !== 201) {
        refuse('purchase', bought.status);
        await sleep(200);
        continue;
      }
      out.purchases++;
      const id = String((bought.body.tunnel as { id: string }).id);
      if (!(await job('provision', 'apply', id, () => api('POST', `/api/dedicated/${id}/provision`)))) continue;
      if (!(await job('patch', 'apply', id, () => api('PATCH', `/api/dedicated/${id}`, { ports: i % 2 ? '80,443' : '22,80,443' })))) continue;
      await job('delete', 'remove', id, () => api('DELETE', `/api/dedicated/${id}`));
    }
  };
  await Promise.all(Array.from({ length: clients }, (_, c) => client(c)));
  return out;
}

