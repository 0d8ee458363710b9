import type { StoredState } from './cep/host.js';

/** Lineages a key's states are kept for in one flat array; a key with more gets a Map. */
const MAX_FLAT = 64;

/**
 * One key's states by lineage (`ruleId@epoch`), in insertion order, with the part of `Map`'s
 * interface the partition uses. A key holds a few dozen lineages (36 on average in the e2e
 * benchmark's keys): as a `Map` that was a hash table of ~1.8 KB, 50 of a state's 60 bytes, and
 * the tables a new state grew were most of what a worker's young-generation collections copied.
 * Up to {@link MAX_FLAT} lineages it is one array `[sid, state, sid, state, …]` searched in
 * order (16 bytes a state); past that, a `Map`, so that a key that meets hundreds of rules is not
 * searched linearly on every hit.
 */
export class LineageStates {
  private flat: unknown[] | undefined = [];
  private map: Map<string, StoredState> | undefined;

  constructor(entries?: Iterable<readonly [string, StoredState]>) {
    if (entries !== undefined) for (const [sid, v] of entries) this.set(sid, v);
  }

  get size(): number {
    return this.map !== undefined ? this.map.size : (this.flat as unknown[]).length >> 1;
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
    if (this.map !== undefined) {
      this.map.set(sid, v);
      return this;
    }
    const a = this.flat as unknown[];
    const i = this.at(sid);
    if (i >= 0) a[i + 1] = v;
    else if (a.length < 2 * MAX_FLAT) a.push(sid, v);
    else {
      this.map = new Map();
      for (let j = 0; j < a.length; j += 2) this.map.set(a[j] as string, a[j + 1]);
      this.map.set(sid, v);
      this.flat = undefined;
    }
    return this;
  }

  /** {@link set} of a lineage the key does not hold (the caller has just found it absent): no search. */
  add(sid: string, v: StoredState): void {
    if (this.map === undefined && (this.flat as unknown[]).length < 2 * MAX_FLAT)
      (this.flat as unknown[]).push(sid, v);
    else this.set(sid, v);
  }

  delete(sid: string): boolean {
    if (this.map !== undefined) return this.map.delete(sid);
    const i = this.at(sid);
    if (i < 0) return false;
    (this.flat as unknown[]).splice(i, 2);
    this.hint = 0;
    return true;
  }

  *[Symbol.iterator](): IterableIterator<[string, StoredState]> {
    if (this.map !== undefined) {
      yield* this.map;
      return;
    }
    const a = this.flat as unknown[];
    for (let i = 0; i < a.length; i += 2) yield [a[i] as string, a[i + 1]];
  }

  *keys(): IterableIterator<string> {
    for (const [sid] of this) yield sid;
  }

  *values(): IterableIterator<StoredState> {
    for (const [, v] of this) yield v;
  }

  /**
   * Where the last search ended. The hits of an event come in rule order, and a key's lineages
   * were added in the order its rules first met it: the next lineage asked for is nearly always
   * at or just after the last one found, so a search starts there.
   */
  private hint = 0;

  /** Position of `sid` in the flat array; -1 when absent. */
  private at(sid: string): number {
    const a = this.flat as unknown[];
    const n = a.length;
    const from = this.hint < n ? this.hint : 0;
    for (let i = from; i < n; i += 2) if (a[i] === sid) return (this.hint = i);
    for (let i = 0; i < from; i += 2) if (a[i] === sid) return (this.hint = i);
    return -1;
  }
}
