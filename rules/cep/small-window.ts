/**
 * Small sliding windows as shared, immutable values.
 *
 * Most (key, rule) windows of a partition hold one or two entries (bench/README.md), and an event of a busy type meets dozens of threshold rules on its key: the rules of a type
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

/**
 * A sliding window as an immutable value, compacted (its oldest entry first), in one array of
 * numbers: `[sum, f, sums, t₀ … tₙ₋₁, v₀ … vₙ₋₁]`, the values only when `sums` is 1. `sum` is the
 * window's sum (0 for count) as the mutable window computes it, `f` the front end of its two
 * stacks (see `SlidingState.f`; 0 for count). One array, where an object with `t` and `v` arrays
 * and a boxed `sum` was six heap objects: in `bench:e2e` a worker's heap held 142,000 small
 * windows, three objects in four of all it held, and a garbage collection marks or copies each
 * object. Read it through the functions below; {@link isSmallWindow} tells it from the other
 * operator states, which are objects.
 */
export type SmallWindow = readonly number[] & { readonly __smallWindow: never };

const SUM = 0;
const FRONT = 1;
const SUMS = 2;
/** Where the timestamps start. */
const HEAD = 3;

/** Whether an operator state is a small window (the other states are objects with a `k`). */
export function isSmallWindow(op: unknown): op is SmallWindow {
  return Array.isArray(op);
}

/** Entries the window holds. */
export function smallSize(w: SmallWindow): number {
  return w[SUMS] === 1 ? (w.length - HEAD) >> 1 : w.length - HEAD;
}

/** Whether the window keeps values (`sum`, `avg`) or only timestamps (`count`). */
export function smallSums(w: SmallWindow): boolean {
  return w[SUMS] === 1;
}

/** The window's sum (0 for count). */
export function smallSum(w: SmallWindow): number {
  return w[SUM] as number;
}

/** The front end of the window's two stacks (0 for count). */
export function smallFront(w: SmallWindow): number {
  return w[FRONT] as number;
}

/** The timestamps as a new array. */
export function smallTimes(w: SmallWindow): number[] {
  return w.slice(HEAD, HEAD + smallSize(w));
}

/** The newest entry's time; -Infinity for an empty window. */
export function smallNewest(w: SmallWindow): number {
  const n = smallSize(w);
  return n === 0 ? -Infinity : (w[HEAD + n - 1] as number);
}

/** The values as a new array (empty for count). */
export function smallValues(w: SmallWindow): number[] {
  return smallSums(w) ? w.slice(HEAD + smallSize(w)) : [];
}

/** Where in the window's array timestamps (`t`) or values (`v`) start: for writers of its text. */
export function smallOffset(w: SmallWindow, part: 't' | 'v'): number {
  return part === 't' ? HEAD : HEAD + smallSize(w);
}

/**
 * The sum of the `n` values of `a` from `at` in the mutable window's order: `[0, f)` from `f − 1`
 * down, plus `[f, n)` in order.
 */
function rangeSum(a: readonly number[], at: number, n: number, f: number): number {
  let front = 0;
  for (let i = f - 1; i >= 0; i--) front += a[at + i] as number;
  let back = 0;
  for (let i = f; i < n; i++) back += a[at + i] as number;
  return (f > 0 ? front : 0) + back;
}

/** A window's array for `n` entries, the entries still to be written, then {@link seal}. */
function newWindow(n: number, sums: boolean): number[] {
  return new Array<number>(HEAD + (sums ? 2 * n : n));
}

/** Writes the head of a window whose `n` entries are in place: its sum, front end and kind. */
function seal(w: number[], n: number, sums: boolean, f: number): SmallWindow {
  w[SUM] = sums ? rangeSum(w, HEAD + n, n, f) : 0;
  w[FRONT] = f;
  w[SUMS] = sums ? 1 : 0;
  return w as unknown as SmallWindow;
}

/** A small window from its parts (a restored one, say). */
export function smallWindow(
  t: readonly number[],
  v: readonly number[],
  sums: boolean,
  f: number,
): SmallWindow {
  const n = t.length;
  const w = newWindow(n, sums);
  for (let i = 0; i < n; i++) w[HEAD + i] = t[i] as number;
  if (sums) for (let i = 0; i < n; i++) w[HEAD + n + i] = v[i] as number;
  return seal(w, n, sums, f);
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
  if (w === undefined) return 0;
  const size = smallSize(w);
  let n = 0;
  while (n < size && (w[HEAD + n] as number) < from) n++;
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
  const n0 = prior === undefined ? 0 : smallSize(prior);
  const n = n0 + 1 - drop;
  const w = newWindow(n, sums);
  for (let i = drop; i < n0; i++) w[HEAD + i - drop] = (prior as SmallWindow)[HEAD + i] as number;
  w[HEAD + n - 1] = ts;
  let f = 0;
  if (sums) {
    for (let i = drop; i < n0; i++)
      w[HEAD + n + i - drop] = (prior as SmallWindow)[HEAD + n0 + i] as number;
    w[HEAD + 2 * n - 1] = value;
    // The mutable window moves the back stack to the front whenever it evicts with the front empty.
    let front = prior === undefined ? 0 : smallFront(prior);
    for (let i = 0; i < drop; i++) if (i >= front) front = n0 + 1;
    f = front - drop;
  }
  const sw = seal(w, n, sums, f);
  // An event's hits under many keys (rules keyed by other fields) would make the search quadratic.
  if (made.length < MADE_MAX) made.push({ prior, sums, value: x, drop, w: sw });
  return sw;
}
