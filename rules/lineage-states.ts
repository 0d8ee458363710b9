import type { StoredState } from './cep/host.js';

/**
 * Lineages a key's states are kept for in one flat array; a key with more gets a Map. At 64, many
 * keys of a `bench:e2e` worker had a Map, and their tables were a large part of the heap; at 128,
 * `bench:core` held fewer bytes per state and read as fast or faster (figures in bench/README.md).
 */
const MAX_FLAT = 128;

/**
 * One key's states by lineage (`ruleId@epoch`), in insertion order, with the part of `Map`'s
 * interface the partition uses. A key holds from one lineage to a few dozen: as a `Map` that was a
 * hash table most of whose bytes were the table's own, and the tables a new state grew were most of what a worker's young-generation collections
 * copied. Up to {@link MAX_FLAT} lineages it is one array `[sid, state, sid, state, …]` of its own
 * capacity (an array grown by `push` keeps 16 spare slots, more than a one-lineage key uses),
 * searched in order; past that, a `Map`, so that a key that meets hundreds of rules is not
 * searched linearly on every hit.
 */
export class LineageStates {
  /** `[sid, state, …]` in its first `n` slots; undefined once `map` holds the states. */
  private flat: unknown[] | undefined;
  private n = 0;
  private map: Map<string, StoredState> | undefined;
  /**
   * Where the last search ended. The hits of an event come in rule order, and a key's lineages
   * were added in the order its rules first met it: the next lineage asked for is nearly always
   * at or just after the last one found, so a search starts there.
   */
  private hint = 0;
  /**
   * The expiry bucket the key is listed in (see `ExpiryQueue`), at or before the first time one
   * of its states can be removed; undefined when no state of the key ends by itself (tumbling
   * windows, sequences and absence triggers end by their own timers).
   */
  exp: number | undefined = undefined;

  constructor(entries?: Iterable<readonly [string, StoredState]>) {
    if (entries !== undefined) for (const [sid, v] of entries) this.set(sid, v);
  }

  /** True when adding a lineage would grow the flat array (or make it). */
  get full(): boolean {
    return this.map === undefined && (this.flat === undefined || this.n === this.flat.length);
  }

  get size(): number {
    return this.map !== undefined ? this.map.size : this.n >> 1;
  }

  get(sid: string): StoredState {
    if (this.map !== undefined) return this.map.get(sid);
    const i = this.at(sid);
    return i < 0 ? undefined : (this.flat as unknown[])[i + 1];
  }

  has(sid: string): boolean {
    return this.map !== undefined ? this.map.has(sid) : this.at(sid) >= 0;
  }

  set(sid: string, v: StoredState): this {
    if (this.map !== undefined) this.map.set(sid, v);
    else {
      const i = this.at(sid);
      if (i >= 0) (this.flat as unknown[])[i + 1] = v;
      else this.add(sid, v);
    }
    return this;
  }

  /**
   * {@link set} of a lineage the key does not hold (the caller has just found it absent): no search.
   * `more`: how many lineages the caller may add right after this one. An event of a type the key
   * has not met yet adds one lineage per rule of the type it meets (ten or so in the benchmarks),
   * one after another: room for them all at the first growth, instead of a grown copy every few.
   */
  add(sid: string, v: StoredState, more = 0): void {
    if (this.map !== undefined) {
      this.map.set(sid, v);
      return;
    }
    const n = this.n;
    let a = this.flat;
    if (n >= 2 * MAX_FLAT) {
      const map = new Map<string, StoredState>();
      for (let j = 0; j < n; j += 2)
        map.set((a as unknown[])[j] as string, (a as unknown[])[j + 1]);
      map.set(sid, v);
      this.map = map;
      this.flat = undefined;
      this.n = 0;
      return;
    }
    if (a === undefined || n === a.length) {
      // A third more room each time (at least two lineages), or room for the lineages the
      // caller is about to add: slack stays small.
      const room = Math.min(
        2 * MAX_FLAT,
        n + Math.max(n === 0 ? 2 : Math.max(4, (n / 3) & ~1), 2 + 2 * more),
      );
      const grown = new Array<unknown>(room);
      for (let j = 0; j < n; j++) grown[j] = (a as unknown[])[j];
      this.flat = a = grown;
    }
    a[n] = sid;
    a[n + 1] = v;
    this.n = n + 2;
  }

  delete(sid: string): boolean {
    if (this.map !== undefined) return this.map.delete(sid);
    const i = this.at(sid);
    if (i < 0) return false;
    const a = this.flat as unknown[];
    const n = this.n;
    for (let j = i; j < n - 2; j++) a[j] = a[j + 2];
    // Cleared, so that a state dropped is not kept alive by a slot past the end.
    a[n - 2] = a[n - 1] = undefined;
    this.n = n - 2;
    this.hint = 0;
    return true;
  }

  /**
   * Calls `fn` for each state in insertion order, as `Map.prototype.forEach` does. Why not the
   * iterator: a generator's pairs and results are objects per state, and checkpoints walk every
   * state of every changed key; in `bench:e2e` those iterations were a fifth of all a worker
   * allocated (sampling heap profiler, bench/README.md).
   */
  forEach(fn: (state: StoredState, sid: string) => void): void {
    if (this.map !== undefined) {
      this.map.forEach((v, sid) => fn(v, sid));
      return;
    }
    const a = this.flat;
    for (let i = 0; i < this.n; i += 2) fn((a as unknown[])[i + 1], (a as unknown[])[i] as string);
  }

  *[Symbol.iterator](): IterableIterator<[string, StoredState]> {
    if (this.map !== undefined) {
      yield* this.map;
      return;
    }
    const a = this.flat;
    for (let i = 0; i < this.n; i += 2)
      yield [(a as unknown[])[i] as string, (a as unknown[])[i + 1]];
  }

  *keys(): IterableIterator<string> {
    for (const [sid] of this) yield sid;
  }

  *values(): IterableIterator<StoredState> {
    for (const [, v] of this) yield v;
  }

  /** Position of `sid` in the flat array; -1 when absent. */
  private at(sid: string): number {
    const a = this.flat;
    if (a === undefined) return -1;
    const n = this.n;
    const from = this.hint < n ? this.hint : 0;
    for (let i = from; i < n; i += 2) if (a[i] === sid) return (this.hint = i);
    for (let i = 0; i < from; i += 2) if (a[i] === sid) return (this.hint = i);
    return -1;
  }
}
