/**
 * Small sliding windows in a partition's arena of typed arrays.
 *
 * Most (key, rule) windows of a partition hold one or two entries (bench/README.md), and a
 * partition holds millions of them. As JS objects, every window an event made or grew was a new
 * heap object that outlived the young generation's next collection, and copying them was most of
 * what a worker's scavenges did (the pauses that made the activation tail). Here a window of a
 * `count`, `sum` or `avg` rule with at most {@link SMALL_WINDOW_MAX} entries is a record in a
 * `Float64Array` of its partition's {@link WindowArena}, changed in place; the state the partition
 * stores for it is the record's handle, a small integer (no heap object at all). A typed array's
 * contents live outside the collected heap, so collections neither copy nor mark them. A window
 * that would grow past the bound becomes the mutable `SlidingState` of `threshold.ts`, with exactly
 * the state that type would hold, and its record is freed.
 *
 * The numbers are the mutable window's to the bit: sums keep its two-stack order (entries before
 * the front end `f` summed from `f − 1` down, the others in arrival order), so a sum never depends
 * on which form the window had, and a checkpoint writes the same text for both.
 */

/**
 * The one empty array every mutable window shares while an array of it is empty (values for
 * `count`, the deques for all but `min`/`max`, suffix sums until the first rebuild). Frozen, so a
 * write to it fails loudly instead of reaching every window; writers replace it first.
 */
export const NO_ENTRIES: never[] = Object.freeze([]) as unknown as never[];

/** Entries a small window holds at most; one more makes it a mutable `SlidingState`. */
export const SMALL_WINDOW_MAX = 8;
let smallMax = SMALL_WINDOW_MAX;

/**
 * Runs `fn` with another bound on small windows (0: every window mutable). For tests that compare
 * the two forms; not part of the public API.
 */
export function withSmallWindowMax<T>(max: number, fn: () => T): T {
  const before = smallMax;
  smallMax = max;
  try {
    return fn();
  } finally {
    smallMax = before;
  }
}

/** The bound in force (see {@link withSmallWindowMax}). */
export function smallWindowMax(): number {
  return smallMax;
}

/**
 * A small window: the handle of its record in its partition's {@link WindowArena}. Meaningless
 * outside that partition; read it through the arena.
 */
export type SmallWindow = number & { readonly __smallWindow: never };

/** Whether an operator state is a small window (the other states are objects with a `k`). */
export function isSmallWindow(op: unknown): op is SmallWindow {
  return typeof op === 'number';
}

/** Record capacities, in entries: a record moves to the next one up when it fills. */
const CAPS = [1, 2, 4, SMALL_WINDOW_MAX] as const;
/** Classes: capacity index, plus 4 for windows that keep values (`sum`, `avg`). */
const CLASSES = 8;
const SUMS_CLASS = 4;
/**
 * A record: `[n, t₀ … t_cap−1]` for count, `[n, f, sum, t₀ … t_cap−1, v₀ … v_cap−1]` for sums
 * (a count window's front end and sum are always 0).
 */
const N = 0;
const FRONT = 1;
const SUM = 2;
/** A free record's `n`; the slot after it holds the next free record's index (-1: none). */
const FREED = -1;
const NEXT_FREE = 1;

/** A class's (or a handle's) record capacity, in entries. */
const capOf = (cls: number): number => CAPS[cls & 3] as number;
/** Where a class's (or a handle's) timestamps start in its records. */
const headOf = (cls: number): number => ((cls & 7) >= SUMS_CLASS ? 3 : 1);
const widthOf = (cls: number): number => (cls >= SUMS_CLASS ? 3 + 2 * capOf(cls) : 1 + capOf(cls));
/** The class of the smallest record that holds `n` entries. */
function classFor(n: number, sums: boolean): number {
  const c = n <= 1 ? 0 : n <= 2 ? 1 : n <= 4 ? 2 : 3;
  return sums ? c + SUMS_CLASS : c;
}

/**
 * One partition's small windows: per class, one `Float64Array` of fixed-width records and a free
 * list threaded through the freed ones. A handle is `index × 8 + class`. Whoever drops a state
 * that holds a handle frees it (the partition, at every point a state is overwritten, deleted,
 * expired or its lineage dropped); {@link live} counts records in use, so tests can hold the
 * partition to that.
 */
export class WindowArena {
  private readonly pools: Float64Array[] = [];
  /** Records handed out at least once, per class. */
  private readonly used = new Int32Array(CLASSES);
  private readonly freeHead = new Int32Array(CLASSES).fill(-1);
  private liveCount = 0;
  private unsafe = false;
  /** Bytes of the records in use. */
  private usedBytes = 0;

  constructor() {
    for (let c = 0; c < CLASSES; c++) this.pools.push(new Float64Array(16 * widthOf(c)));
  }

  /** Records in use. */
  get live(): number {
    return this.liveCount;
  }

  /** Bytes the arena's arrays take (in use or not). */
  get bytes(): number {
    let b = 0;
    for (const p of this.pools) b += p.byteLength;
    return b;
  }

  /**
   * False while every timestamp written is a safe integer in [0, 2^52]: any two are then a safe
   * integer apart, and a checkpoint field may write them as offsets without checking each.
   */
  get unsafeTimes(): boolean {
    return this.unsafe;
  }

  /** Bytes of the records in use. */
  get liveBytes(): number {
    return this.usedBytes;
  }

  /** Entries the window holds. */
  size(w: SmallWindow): number {
    return (this.pools[w & 7] as Float64Array)[(w >>> 3) * widthOf(w & 7) + N] as number;
  }

  /** Whether the window keeps values (`sum`, `avg`) or only timestamps (`count`). */
  sums(w: SmallWindow): boolean {
    return (w & 7) >= SUMS_CLASS;
  }

  /** The window's sum (0 for count). */
  sum(w: SmallWindow): number {
    const cls = w & 7;
    if (cls < SUMS_CLASS) return 0;
    return (this.pools[cls] as Float64Array)[(w >>> 3) * widthOf(cls) + SUM] as number;
  }

  /** The front end of the window's two stacks (0 for count). */
  front(w: SmallWindow): number {
    const cls = w & 7;
    if (cls < SUMS_CLASS) return 0;
    return (this.pools[cls] as Float64Array)[(w >>> 3) * widthOf(cls) + FRONT] as number;
  }

  /** The `i`th oldest entry's time. */
  time(w: SmallWindow, i: number): number {
    const cls = w & 7;
    return (this.pools[cls] as Float64Array)[(w >>> 3) * widthOf(cls) + headOf(cls) + i] as number;
  }

  /** The `i`th oldest entry's value (sums only). */
  value(w: SmallWindow, i: number): number {
    const cls = w & 7;
    const at = (w >>> 3) * widthOf(cls) + 3 + capOf(cls) + i;
    return (this.pools[cls] as Float64Array)[at] as number;
  }

  /** Whether two windows hold the same entries, sums flag and front end. */
  same(a: SmallWindow, b: SmallWindow): boolean {
    const ca = a & 7;
    const cb = b & 7;
    if (ca >= SUMS_CLASS !== cb >= SUMS_CLASS) return false;
    const pa = this.pools[ca] as Float64Array;
    const pb = this.pools[cb] as Float64Array;
    const ra = (a >>> 3) * widthOf(ca);
    const rb = (b >>> 3) * widthOf(cb);
    const n = pa[ra + N] as number;
    if (pb[rb + N] !== n) return false;
    const h = headOf(ca);
    if (h === 3 && pa[ra + FRONT] !== pb[rb + FRONT]) return false;
    for (let i = 0; i < n; i++) if (!Object.is(pa[ra + h + i], pb[rb + h + i])) return false;
    if (h === 3) {
      const va = ra + h + capOf(ca);
      const vb = rb + h + capOf(cb);
      for (let i = 0; i < n; i++) if (!Object.is(pa[va + i], pb[vb + i])) return false;
    }
    return true;
  }

  /** The newest entry's time. */
  newest(w: SmallWindow): number {
    return this.time(w, this.size(w) - 1);
  }

  /** The timestamps as a new array. */
  times(w: SmallWindow): number[] {
    const out: number[] = [];
    for (let i = 0, n = this.size(w); i < n; i++) out.push(this.time(w, i));
    return out;
  }

  /** The values as a new array (empty for count). */
  values(w: SmallWindow): number[] {
    const out: number[] = [];
    if (this.sums(w)) for (let i = 0, n = this.size(w); i < n; i++) out.push(this.value(w, i));
    return out;
  }

  /** A new window from its parts (a restored one, say); see {@link fitsSmallWindow}. */
  make(t: readonly number[], v: readonly number[], sums: boolean, f: number): SmallWindow {
    const n = t.length;
    const w = this.alloc(classFor(n, sums));
    const a = this.pools[w & 7] as Float64Array;
    const at = (w >>> 3) * widthOf(w & 7);
    const tAt = at + headOf(w);
    const vAt = tAt + capOf(w);
    for (let i = 0; i < n; i++) a[tAt + i] = this.checked(t[i] as number);
    if (sums) for (let i = 0; i < n; i++) a[vAt + i] = v[i] as number;
    this.seal(a, at, vAt, n, sums, f);
    return w;
  }

  /** A window of its own holding what `w` holds. */
  copy(w: SmallWindow): SmallWindow {
    const cls = w & 7;
    const c = this.alloc(cls);
    // Read after alloc: it may have grown (and so replaced) the class's pool.
    const a = this.pools[cls] as Float64Array;
    const width = widthOf(cls);
    const from = (w >>> 3) * width;
    const to = (c >>> 3) * width;
    // A loop: for a few numbers, faster than `copyWithin`'s call into the runtime.
    for (let i = 0; i < width; i++) a[to + i] = a[from + i] as number;
    return c;
  }

  /** Gives the window's record back; the handle must not be used again. */
  free(w: SmallWindow): void {
    const cls = w & 7;
    const a = this.pools[cls] as Float64Array;
    const at = (w >>> 3) * widthOf(cls);
    if (a[at + N] === FREED) throw new Error(`small window ${w} freed twice`);
    a[at + N] = FREED;
    a[at + NEXT_FREE] = this.freeHead[cls] as number;
    this.freeHead[cls] = w >>> 3;
    this.liveCount--;
    this.usedBytes -= widthOf(cls) * 8;
  }

  /**
   * Appends the entry `(ts, value)` (value ignored unless `sums`) to `prior` (undefined: a new
   * window) and drops its `drop` oldest entries (never the new one), as the mutable window evicts
   * them: by time ({@link entriesBefore}), then past the size limit. The caller has checked that
   * `prior` holds fewer than {@link smallWindowMax} entries. Returns the window's handle: `prior`,
   * changed in place, or a new record when the entries no longer fit (or now fit one a quarter of
   * the size), `prior`'s freed.
   */
  append(
    prior: SmallWindow | undefined,
    sums: boolean,
    ts: number,
    value: number,
    drop: number,
  ): SmallWindow {
    const n0 = prior === undefined ? 0 : this.size(prior);
    const n = n0 + 1 - drop;
    let w: SmallWindow;
    let front = 0;
    if (prior !== undefined && sums) {
      // The mutable window moves the back stack to the front whenever it evicts with the front empty.
      front = this.front(prior);
      for (let i = 0; i < drop; i++) if (i >= front) front = n0 + 1;
    }
    // Only the new entry left: a new window's front end (see `onSliding` in threshold.ts).
    const f = sums && drop < n0 ? front - drop : 0;
    if (prior !== undefined && n <= capOf(prior) && (n << 2 > capOf(prior) || capOf(prior) === 1)) {
      w = prior;
      if (drop > 0) {
        const a = this.pools[w & 7] as Float64Array;
        const at = (w >>> 3) * widthOf(w & 7) + headOf(w);
        for (let i = drop; i < n0; i++) a[at + i - drop] = a[at + i] as number;
        if (sums) {
          const vAt = at + capOf(w);
          for (let i = drop; i < n0; i++) a[vAt + i - drop] = a[vAt + i] as number;
        }
      }
    } else {
      w = this.alloc(classFor(n, sums));
      if (prior !== undefined) {
        // Both read after alloc: it may have grown (and so replaced) the new record's pool.
        const from = this.pools[prior & 7] as Float64Array;
        const fAt = (prior >>> 3) * widthOf(prior & 7) + headOf(prior);
        const a = this.pools[w & 7] as Float64Array;
        const at = (w >>> 3) * widthOf(w & 7) + headOf(w);
        for (let i = drop; i < n0; i++) a[at + i - drop] = from[fAt + i] as number;
        if (sums) {
          const vFrom = fAt + capOf(prior);
          const vAt = at + capOf(w);
          for (let i = drop; i < n0; i++) a[vAt + i - drop] = from[vFrom + i] as number;
        }
        this.free(prior);
      }
    }
    const a = this.pools[w & 7] as Float64Array;
    const at = (w >>> 3) * widthOf(w & 7);
    const tAt = at + headOf(w);
    const vAt = tAt + capOf(w);
    a[tAt + n - 1] = this.checked(ts);
    if (sums) a[vAt + n - 1] = value;
    this.seal(a, at, vAt, n, sums, f);
    return w;
  }

  private checked(t: number): number {
    if (!(Number.isSafeInteger(t) && t >= 0 && t <= 2 ** 52)) this.unsafe = true;
    return t;
  }

  /** Writes the header of a record whose `n` entries are in place: its size, front end and sum. */
  private seal(
    a: Float64Array,
    at: number,
    vAt: number,
    n: number,
    sums: boolean,
    f: number,
  ): void {
    a[at + N] = n;
    if (!sums) return;
    a[at + FRONT] = f;
    a[at + SUM] = rangeSum(a, vAt, n, f);
  }

  private alloc(cls: number): SmallWindow {
    this.liveCount++;
    this.usedBytes += widthOf(cls) * 8;
    let i = this.freeHead[cls] as number;
    const width = widthOf(cls);
    if (i >= 0) {
      this.freeHead[cls] = (this.pools[cls] as Float64Array)[i * width + NEXT_FREE] as number;
    } else {
      i = this.used[cls] as number;
      this.used[cls] = i + 1;
      const pool = this.pools[cls] as Float64Array;
      if ((i + 1) * width > pool.length) {
        const grown = new Float64Array(pool.length * 2);
        grown.set(pool);
        this.pools[cls] = grown;
      }
    }
    return (i * 8 + cls) as SmallWindow;
  }
}

/**
 * The sum of the `n` values from `at` in the mutable window's order: `[0, f)` from `f − 1` down,
 * plus `[f, n)` in order.
 */
function rangeSum(a: Float64Array, at: number, n: number, f: number): number {
  let front = 0;
  for (let i = f - 1; i >= 0; i--) front += a[at + i] as number;
  let back = 0;
  for (let i = f; i < n; i++) back += a[at + i] as number;
  return (f > 0 ? front : 0) + back;
}

/**
 * Whether restored window parts can be a small window and write back the same text: timestamps
 * and values finite numbers, a value per entry for sums and none for count, `f` where the mutable
 * window can have it, no more than {@link SMALL_WINDOW_MAX} entries. A min, max or distinct window
 * that holds anything has deques or counts, so it never passes.
 */
export function fitsSmallWindow(
  t: readonly unknown[],
  v: readonly unknown[],
  sums: boolean,
  f: unknown,
): boolean {
  if (t.length > smallMax || t.length === 0) return false;
  if (sums ? v.length !== t.length : v.length !== 0 || f !== 0) return false;
  if (typeof f !== 'number' || !Number.isInteger(f) || f < 0 || f > t.length) return false;
  for (const x of t) if (typeof x !== 'number' || !Number.isFinite(x)) return false;
  for (const x of v) if (typeof x !== 'number' || !Number.isFinite(x)) return false;
  return true;
}

/** How many of a window's entries are before `from` (the entries an event at `from + window` evicts). */
export function entriesBefore(
  arena: WindowArena,
  w: SmallWindow | undefined,
  from: number,
): number {
  if (w === undefined) return 0;
  const size = arena.size(w);
  let n = 0;
  while (n < size && arena.time(w, n) < from) n++;
  return n;
}
