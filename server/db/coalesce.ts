// Coalesces concurrent calls of one statement into batches: at most `maxInFlight` batches are sent at
// a time, and calls that arrive meanwhile wait and leave together as the next batch (one round trip,
// one commit). With little traffic every call leaves at once, alone, so nothing waits that would not
// have waited anyway; under load the per-call cost of a round trip (a socket write and read on each
// side, a commit and its WAL flush) is shared by the whole batch. Every call still gets its answer
// from a statement sent after it was made.
export class Coalescer<I, O> {
  private queue: Array<{ item: I; resolve: (o: O) => void; reject: (e: unknown) => void }> = [];
  private inFlight = 0;

  constructor(
    /** Runs one batch; returns one result per item, in order. */
    private readonly run: (items: I[]) => Promise<O[]>,
    private readonly maxInFlight = 2,
    private readonly maxBatch = 64,
  ) {}

  call(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < this.maxInFlight && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      this.inFlight++;
      let sent: Promise<O[]>;
      try {
        sent = this.run(batch.map((b) => b.item));
      } catch (e) {
        sent = Promise.reject(e);
      }
      sent
        .then(
          (out) => {
            if (out.length !== batch.length) throw new Error(`batch of ${batch.length} answered with ${out.length} results`);
            batch.forEach((b, i) => b.resolve(out[i]!));
          },
        )
        .catch((e: unknown) => batch.forEach((b) => b.reject(e)))
        .finally(() => {
          this.inFlight--;
          this.pump();
        });
    }
  }
}
