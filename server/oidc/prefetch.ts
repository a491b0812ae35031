// A hand-over of rows read ahead: one query reads a token together with its grant and user, and the
// lookups that follow in the same request take those rows from here instead of querying again.
// Several requests may read ahead the same key at once (one grant, many codes), so each key holds a
// queue: every read-ahead puts one entry, every take removes one. Entries are taken once and only
// within `maxAgeMs`, so a taken row is never older than the request already using it.
export class Prefetched<T> {
  private readonly entries = new Map<string, Array<{ value: T; at: number }>>();

  constructor(
    private readonly maxAgeMs = 1_000,
    private readonly maxKeys = 10_000,
    /** A token found but then refused (another client's, say) leaves its entry untaken: bound each queue. */
    private readonly maxPerKey = 64,
  ) {}

  put(key: string, value: T, now = Date.now()): void {
    let queue = this.entries.get(key);
    if (!queue) {
      if (this.entries.size >= this.maxKeys) this.entries.clear();
      queue = [];
      this.entries.set(key, queue);
    }
    if (queue.length >= this.maxPerKey) queue.shift();
    queue.push({ value, at: now });
  }

  take(key: string, now = Date.now()): T | undefined {
    const queue = this.entries.get(key);
    if (!queue) return undefined;
    let hit: { value: T; at: number } | undefined;
    while ((hit = queue.shift()) && now - hit.at >= this.maxAgeMs);
    if (queue.length === 0) this.entries.delete(key);
    return hit && now - hit.at < this.maxAgeMs ? hit.value : undefined;
  }

  /**
   * Forgets every entry of `key`: a row that was read ahead and then deleted (a revoked grant) must not
   * be handed to a later lookup, which would otherwise see a grant that no longer exists.
   */
  drop(key: string): void {
    this.entries.delete(key);
  }
}
