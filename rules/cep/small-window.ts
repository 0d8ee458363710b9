/**
 * Small sliding windows as shared, immutable values.
 *
 * Most (key, rule) windows of a partition hold one or two entries (in the e2e benchmark 93% held
 * one), and an event of a busy type meets dozens of threshold rules on its key: the rules of a type
 * that key alike and accept the same events hold equal windows. A mutable window per (key, rule)
 * was four or five objects for one timestamp, and copying and marking them was most of the
 * garbage collector's work. A window of a `count`, `sum` or `avg` rule with at most
 * {@link SMALL_WINDOW_MAX} entries is therefore a value: every change makes a new one, and the
 * rules that make the same change to the same window while one event is applied get the very same
 * object. A window that would grow past the bound becomes the mutable `SlidingState` of
 * `threshold.ts`, with exactly the state that type would hold.
 *
 * The numbers are the mutable window's to the bit: sums keep its two-stack order (entries before
 * the front end `f` summed from `f − 1` down, the others in arrival order), so a sum never depends
 * on which form the window had, and a checkpoint writes the same text for both.
 */

/**
 * The one empty array every window shares while an array of it is empty (values for `count`, the
 * deques for all but `min`/`max`, suffix sums until the first rebuild): a partition holds
 * millions of windows, and four empty arrays each were a quarter of their memory. Frozen, so a
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

/** A sliding window as an immutable value: compacted (its oldest entry first). */
export interface SmallWindow {
  readonly k: 'w';
  /** Event times, oldest first. */
  readonly t: readonly number[];
  /** Values (sum/avg; {@link NO_ENTRIES} for count), one per entry. */
  readonly v: readonly number[];
  readonly sums: boolean;
  /** Front end of the two stacks (see `SlidingState.f`); 0 for count. */
  readonly f: number;
  /** The window's sum (0 for count), as the mutable window computes it. */
  readonly sum: number;
}

/** The sum of `v` in the mutable window's order: `[0, f)` from `f − 1` down, plus `[f, n)` in order. */
export function twoStackSum(v: readonly number[], f: number): number {
  let front = 0;
  for (let i = f - 1; i >= 0; i--) front += v[i] as number;
  let back = 0;
  for (let i = f; i < v.length; i++) back += v[i] as number;
  return (f > 0 ? front : 0) + back;
}

/** A small window from its parts (a restored one, say). */
export function smallWindow(
  t: readonly number[],
  v: readonly number[],
  sums: boolean,
  f: number,
): SmallWindow {
  return { k: 'w', t, v, sums, f, sum: sums ? twoStackSum(v, f) : 0 };
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

/** Changes made while applying one event: the same change to the same window gives the same object. */
interface Made {
  prior: SmallWindow | undefined;
  sums: boolean;
  value: number;
  drop: number;
  w: SmallWindow;
}
let madeFor: object | undefined;
const made: Made[] = [];
const MADE_MAX = 32;

/** How many of a window's entries are before `from` (the entries an event at `from + window` evicts). */
export function entriesBefore(w: SmallWindow | undefined, from: number): number {
  const t = w?.t ?? NO_ENTRIES;
  let n = 0;
  while (n < t.length && (t[n] as number) < from) n++;
  return n;
}

/**
 * Appends the entry `(ts, value)` (value ignored unless `sums`) to `prior` (undefined: an empty
 * window) and drops its `drop` oldest entries (never the new one), as the mutable window evicts
 * them: by time ({@link entriesBefore}), then past the size limit. The caller has checked that
 * `prior` holds fewer than {@link smallWindowMax} entries. `event` identifies the event being
 * applied: while it stays the same, equal changes return the same window.
 */
export function appendSmall(
  event: object,
  prior: SmallWindow | undefined,
  sums: boolean,
  ts: number,
  value: number,
  drop: number,
): SmallWindow {
  const x = sums ? value : 0;
  if (madeFor !== event) {
    madeFor = event;
    made.length = 0;
  }
  for (let i = 0; i < made.length; i++) {
    const m = made[i] as Made;
    // The same entries dropped, by time or by the limit: the same window, whichever dropped them.
    if (m.prior === prior && m.sums === sums && Object.is(m.value, x) && m.drop === drop)
      return m.w;
  }
  const t0 = prior?.t ?? NO_ENTRIES;
  const n = t0.length + 1;
  const t = new Array<number>(n - drop);
  for (let i = drop; i < t0.length; i++) t[i - drop] = t0[i] as number;
  t[n - 1 - drop] = ts;
  let v: number[] = NO_ENTRIES;
  let f = 0;
  if (sums) {
    const v0 = prior?.v ?? NO_ENTRIES;
    v = new Array<number>(n - drop);
    for (let i = drop; i < v0.length; i++) v[i - drop] = v0[i] as number;
    v[n - 1 - drop] = value;
    // The mutable window moves the back stack to the front whenever it evicts with the front empty.
    let front = prior?.f ?? 0;
    for (let i = 0; i < drop; i++) if (i >= front) front = n;
    f = front - drop;
  }
  const w = smallWindow(t, v, sums, f);
  // An event's hits under many keys (rules keyed by other fields) would make the search quadratic.
  if (made.length < MADE_MAX) made.push({ prior, sums, value: x, drop, w });
  return w;
}
