// Waiting on conditions instead of on the clock. A test decides its result from state it observes; the
// only time here is a generous bound that turns a hang into a failure naming what never happened, far
// above what a loaded 2-core host needs (nothing passes or fails by being quick or slow within it).

/** Polls `fn` until it returns something truthy; returns that. Throws "never saw WHAT" after `boundMs`. */
export async function until<T>(what: string, fn: () => Promise<T | null | undefined | false> | T | null | undefined | false, boundMs = 120_000): Promise<T> {
  const end = Date.now() + boundMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`never saw ${what} (gave up after ${boundMs} ms)`, { cause: last });
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * docs/CONTRACTS.md "Tunnel lifecycle": provision and delete answer 200 with the final status when the agent answered within the
 * gateway's wait, 202 with the in-between status while the job keeps going. Which one depends on how fast
 * the host is, so a test accepts both and then waits for the final status; it returns that status.
 */
export async function settle(
  answer: { status: number; body: { tunnel?: { status: string } } },
  final: string,
  readStatus: () => Promise<string | undefined>,
): Promise<string> {
  if (answer.status === 202) return until(`status ${final}`, async () => ((await readStatus()) === final ? final : null));
  if (answer.status !== 200) throw new Error(`expected 200 or 202, got ${answer.status}: ${JSON.stringify(answer.body)}`);
  return answer.body.tunnel!.status;
}
