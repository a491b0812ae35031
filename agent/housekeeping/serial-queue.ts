// One operation at a time, in arrival order: the dataplane's kernel changes and journal writes must never
// interleave (a reconcile reading the kernel back while an apply changes it would plan from a stale view).
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();

  /** Runs `fn` after everything queued before it has settled; a failure does not stop the queue. */
  run<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.tail.then(fn, fn);
    this.tail = p.catch(() => undefined);
    return p;
  }

  /** Resolves once everything queued so far has settled. */
  async drained(): Promise<void> {
    await this.tail;
  }
}
