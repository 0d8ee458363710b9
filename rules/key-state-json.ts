import { StateList, type KeyStates } from './keyed-states.js';
import { refsFromArray, refsToArray, type SequenceState } from './cep/sequence.js';
import {
  NO_ENTRIES,
  slidingWindow,
  type SlidingState,
  type TumblingState,
} from './cep/threshold.js';
import {
  fitsSmallWindow,
  isSmallWindow,
  type SmallWindow,
  type WindowArena,
} from './cep/small-window.js';
import { SnapshotError } from './errors.js';
import { entryText, type LineageIndex } from './lineage-index.js';
import type { EventRef } from './types.js';

/**
 * Keyed state to and from JSON: one key's states (every rule lineage of the key) as a checkpoint
 * field, and the operator states inside. Snapshots and checkpoints (`snapshot.ts`) write and read
 * these; a restored partition decodes a key's field when it first touches the key (`partition.ts`).
 */

/** One lineage's state of a key. */
export type LineageStateJSON = [lineage: string, sup: number | null, op: unknown];
/** v5 checkpoint fields: one lineage's state of a key, the lineage by its number (see LineageIndex). */
export type NumberedStateJSON = [lineage: number, op: unknown, sup?: number];

/** Non-finite numbers as strings: JSON would turn them into null. */
const enc = (x: number): number | string => (Number.isFinite(x) ? x : String(x));
const dec = (x: unknown): number => (typeof x === 'string' ? Number(x) : (x as number));

/** An operator state as JSON; `windows` holds the partition's small windows. */
export function opToJSON(op: unknown, windows: WindowArena): unknown {
  // A small window is written as the mutable window holding the same entries.
  if (isSmallWindow(op))
    return {
      k: 's',
      sums: windows.sums(op),
      t: windows.times(op),
      v: windows.values(op),
      f: windows.front(op),
      mn: [],
      mx: [],
      d: null,
    };
  const s = op as SlidingState | TumblingState | SequenceState | undefined;
  if (s?.k === 's') {
    // Stored compacted (head at 0). The two-stack sums are not stored: restore recomputes them
    // from the values in the same order, which gives the very same numbers (non-finite ones too).
    return {
      k: 's',
      sums: s.sums,
      t: s.t.slice(s.h),
      v: s.v.slice(s.h),
      f: Math.max(0, s.f - s.h),
      mn: s.mn.map((i) => i - s.h),
      mx: s.mx.map((i) => i - s.h),
      d: s.d ? [...s.d] : null,
    };
  }
  if (s?.k === 't')
    return { ...s, d: s.d ? [...s.d] : null, min: enc(s.min), max: enc(s.max), sum: enc(s.sum) };
  if (s?.k === 'q') return { ...s, pm: s.pm.map((m) => ({ ...m, refs: refsToArray(m.refs) })) };
  return op;
}

/** Restored empty arrays share {@link NO_ENTRIES}, as new windows do. */
const orNone = <T>(a: T[]): T[] => (a.length === 0 ? NO_ENTRIES : a);

/**
 * A keyed state's operator state from its JSON, a small window made in `windows`. Sliding windows:
 * v2 writes every part and absolute timestamps; v3 fields leave empty parts out and write
 * timestamps as offsets from `base`.
 */
export function opFromJSON(op: unknown, base: number, windows: WindowArena): unknown {
  const s = op as Record<string, unknown> | null | undefined;
  if (s === null || s === undefined) return undefined;
  if (s.k === 's') {
    const t = s.t as number[];
    if (base !== 0) for (let i = 0; i < t.length; i++) t[i] = (t[i] as number) + base;
    const v = orNone((s.v ?? NO_ENTRIES) as unknown[]);
    const d = (s.d ?? null) as [string, number][] | null;
    const f = s.f ?? 0;
    const mn = (s.mn ?? NO_ENTRIES) as number[];
    const mx = (s.mx ?? NO_ENTRIES) as number[];
    if (
      mn.length === 0 &&
      mx.length === 0 &&
      (d === null || d.length === 0) &&
      fitsSmallWindow(t, v, s.sums === true, f)
    )
      return windows.make(t, v as number[], s.sums === true, f as number);
    // The two-stack sums are recomputed from the values in the same order as the window made
    // them, which gives the very same numbers (non-finite ones too).
    return slidingWindow(
      t,
      v,
      s.sums === true,
      f as number,
      mn,
      mx,
      d === null ? undefined : new Map(d),
    );
  }
  if (s.k === 't')
    return {
      ...s,
      d: s.d === null ? undefined : new Map(s.d as [string, number][]),
      min: dec(s.min),
      max: dec(s.max),
      sum: dec(s.sum),
    };
  if (s.k === 'q')
    return {
      ...s,
      pm: (s.pm as Record<string, unknown>[]).map((m) => ({
        ...m,
        refs: refsFromArray(m.refs as EventRef[]),
      })),
    };
  return s;
}

export function keyStatesJSON(states: KeyStates, windows: WindowArena): LineageStateJSON[] {
  const out: LineageStateJSON[] = [];
  states.forEach((sid, sup, op) => out.push([sid, sup ?? null, opToJSON(op, windows)]));
  return out;
}

/**
 * The first timestamp of the key's sliding windows: v3 fields store window timestamps as offsets
 * from it, a few digits instead of thirteen. 0 (absolute timestamps) unless every one is a safe
 * integer, so that `base + (t - base)` gives `t` back exactly.
 */
function fieldBase(states: KeyStates): number {
  let found = false;
  let base = 0;
  for (let j = 0, size = states.size; j < size; j++) {
    const s = states.opAt(j) as SlidingState | SmallWindow | undefined;
    let n: number;
    if (isSmallWindow(s)) {
      if (
        !arena.unsafeTimes &&
        (!found || (Number.isSafeInteger(base) && base >= 0 && base <= 2 ** 52))
      ) {
        // Every timestamp in the arena is a safe integer in [0, 2^52], and so is the base:
        // they are a safe integer apart.
        if (!found) {
          found = true;
          base = arena.time(s, 0);
        }
        continue;
      }
      n = arena.size(s);
    } else if (s?.k === 's') n = s.t.length - s.h;
    else continue;
    for (let i = 0; i < n; i++) {
      const t = timeAt(s, i) as number;
      if (!found) {
        found = true;
        base = t;
      }
      // Safe integers of opposite signs can be more than 2^53 apart.
      if (!Number.isSafeInteger(t) || !Number.isSafeInteger(t - base)) return 0;
    }
  }
  return base;
}

/**
 * One key's states as checkpoint field text: `[base, [lineage, state, sup?], …]`, each lineage by
 * its number in the partition's `index` (v5; `sup` only when an alert was suppressed from). Sliding
 * windows are written compacted (head at 0), their timestamps as offsets from `base`, and leave out
 * what is empty (values of `count`, deques, distinct map, `f` at 0, `sums` when false) (v3). A
 * window equal to one written earlier in the field is written as that entry's position, from 1
 * (v4): the rules of a type that key by the same key and met the same events hold equal windows,
 * and in the benchmark's keys 29 lineages held two distinct ones. Checkpoints write one of these
 * per changed key, so this is most of their cost. Written directly, without building intermediate
 * objects and slices; restore parses it with `JSON.parse`.
 */
export function encodeKeyStates(
  states: KeyStates,
  index: LineageIndex,
  windows: WindowArena,
): string {
  arena = windows;
  const base = fieldBase(states);
  np = 0;
  put('[');
  put(String(base));
  // The distinct plain windows written so far (a few), and their positions.
  const written: (SlidingState | SmallWindow)[] = [];
  const writtenAt: number[] = [];
  for (let at = 1, size = states.size; at <= size; at++) {
    const texts = index.entryTextsOf(states.linAt(at - 1), states.sidAt(at - 1));
    const sup = states.supAt(at - 1);
    let op: number | undefined;
    const s = states.opAt(at - 1) as SlidingState | SmallWindow | undefined;
    if (
      isSmallWindow(s) ||
      (s?.k === 's' &&
        s.mn.length === 0 &&
        s.mx.length === 0 &&
        !(s.d !== undefined && s.d.size > 0))
    ) {
      // A window equal to a plain one is plain too: only a new candidate's values are checked.
      for (let j = 0; j < written.length && op === undefined; j++)
        if (sameWindow(s, written[j] as SlidingState | SmallWindow)) op = writtenAt[j];
      if (op === undefined && written.length < 4 && (isSmallWindow(s) || finiteWindow(s))) {
        written.push(s);
        writtenAt.push(at);
      }
    }
    if (op !== undefined && sup === undefined) {
      put(entryText(texts, op));
      continue;
    }
    put(texts[0] as string);
    if (op !== undefined) put(String(op));
    else putOp(s, base);
    if (sup !== undefined) {
      put(',');
      put(String(sup));
    }
    put(']');
  }
  // v6: the key's expiry bucket last, so a restore lists the key for expiry without decoding it.
  const exp = states.exp;
  if (exp !== undefined) {
    put(',');
    put(String(exp));
  }
  put(']');
  // Stale pieces of a longer field before are dropped, not joined (nor kept alive).
  pieces.length = np;
  return pieces.join('');
}

/** The small windows of the partition whose field is being written (set by {@link encodeKeyStates}). */
let arena: WindowArena;

/**
 * The pieces of the field {@link encodeKeyStates} is writing, joined once at the end, so that a
 * field is one flat string. Built with `+=`, a field was a tree of many cons
 * strings until its checkpoint had been written, and the young generation's collections that met
 * a checkpoint copied them: a large part of what survived a collection under load (the sampling
 * heap profile is in bench/README.md).
 */
const pieces: string[] = [];
let np = 0;
function put(piece: string): void {
  pieces[np++] = piece;
}

/**
 * Whether a window's timestamps and values are all finite numbers: with empty deques and distinct
 * map, its text is its timestamps, values, sums flag and front end only (a plain window).
 */
function finiteWindow(s: SlidingState): boolean {
  for (let i = s.h; i < s.t.length; i++) if (!Number.isFinite(s.t[i])) return false;
  for (let i = s.h; i < s.v.length; i++) {
    const x = s.v[i];
    if (typeof x !== 'number' || !Number.isFinite(x)) return false;
  }
  return true;
}

/** Whether two plain windows of one key write the same text. */
function sameWindow(a: SlidingState | SmallWindow, b: SlidingState | SmallWindow): boolean {
  if (isSmallWindow(a) && isSmallWindow(b)) return arena.same(a, b);
  if (
    windowSums(a) !== windowSums(b) ||
    windowSize(a) !== windowSize(b) ||
    windowValues(a) !== windowValues(b) ||
    windowFront(a) !== windowFront(b)
  )
    return false;
  for (let i = 0, n = windowSize(a); i < n; i++) if (timeAt(a, i) !== timeAt(b, i)) return false;
  for (let i = 0, n = windowValues(a); i < n; i++)
    if (valueAt(a, i) !== valueAt(b, i)) return false;
  return true;
}

// A plain window's parts in either form, compacted: a small window's record, or a mutable
// window's arrays from its head.
const windowSize = (w: SlidingState | SmallWindow): number =>
  isSmallWindow(w) ? arena.size(w) : w.t.length - w.h;
const windowValues = (w: SlidingState | SmallWindow): number =>
  isSmallWindow(w) ? (arena.sums(w) ? arena.size(w) : 0) : Math.max(0, w.v.length - w.h);
const windowSums = (w: SlidingState | SmallWindow): boolean =>
  isSmallWindow(w) ? arena.sums(w) : w.sums;
const windowFront = (w: SlidingState | SmallWindow): number =>
  isSmallWindow(w) ? arena.front(w) : Math.max(0, w.f - w.h);
const timeAt = (w: SlidingState | SmallWindow, i: number): unknown =>
  isSmallWindow(w) ? arena.time(w, i) : w.t[w.h + i];
const valueAt = (w: SlidingState | SmallWindow, i: number): unknown =>
  isSmallWindow(w) ? arena.value(w, i) : w.v[w.h + i];

/** Puts an operator state's text (see {@link encodeKeyStates}). */
function putOp(op: unknown, base: number): void {
  if (op === undefined) {
    put('null');
    return;
  }
  if (isSmallWindow(op)) {
    // Finite numbers only (fitsSmallWindow, or made from events): the mutable window's text.
    const n = arena.size(op);
    put('{"k":"s","t":[');
    for (let i = 0; i < n; i++) {
      if (i > 0) put(',');
      put(String(arena.time(op, i) - base));
    }
    put(']');
    if (arena.sums(op)) {
      put(',"sums":true,"v":[');
      for (let i = 0; i < n; i++) {
        if (i > 0) put(',');
        put(String(arena.value(op, i)));
      }
      put(']');
    }
    const f = arena.front(op);
    if (f > 0) {
      put(',"f":');
      put(String(f));
    }
    put('}');
    return;
  }
  const s = op as SlidingState;
  if (s.k !== 's') {
    put(JSON.stringify(opToJSON(op, arena)) ?? 'null');
    return;
  }
  const h = s.h;
  const start = np;
  put('{"k":"s","t":');
  // A timestamp that is not finite (possible only through the API): as v2 wrote it (base is 0).
  if (!putNumbers(s.t, h, base)) {
    np = start;
    put(JSON.stringify(opToJSON(op, arena)) ?? 'null');
    return;
  }
  if (s.sums) put(',"sums":true');
  if (s.v.length > h) {
    put(',"v":');
    const values = np;
    if (!putNumbers(s.v, h, 0)) {
      np = values;
      put(JSON.stringify(s.v.slice(h)));
    }
  }
  if (s.f > h) {
    put(',"f":');
    put(String(s.f - h));
  }
  if (s.mn.length > 0) {
    put(',"mn":');
    putNumbers(s.mn, 0, h);
  }
  if (s.mx.length > 0) {
    put(',"mx":');
    putNumbers(s.mx, 0, h);
  }
  if (s.d !== undefined && s.d.size > 0) {
    put(',"d":');
    put(JSON.stringify([...s.d]));
  }
  put('}');
}

/**
 * Puts `JSON.stringify(a.slice(from, to).map((x) => x - minus))` for finite numbers; false, with
 * pieces put that the caller takes back, for anything else.
 */
function putNumbers(a: readonly unknown[], from: number, minus: number): boolean {
  put('[');
  for (let i = from; i < a.length; i++) {
    const x = a[i];
    if (typeof x !== 'number' || !Number.isFinite(x)) return false;
    if (i > from) put(',');
    put(String(x - minus));
  }
  put(']');
  return true;
}

/**
 * One key's states (all its lineages) from its parsed checkpoint field: v5
 * (`[base, [lineage number, state, sup?], …]`, numbers looked up with `nameOf`), v3 or v4
 * (`[base, [lineage, sup, state], …]`), a v4 or v5 state possibly an earlier entry's position,
 * or v2 (`[[lineage, sup, state], …]`). A v4 partition's fields stay as they are until their key
 * is written again, so one partition can hold both. Small windows are made in `windows` (and
 * freed again when the field is refused).
 * @throws SnapshotError when the field is not such a list, or names a lineage number `nameOf` does not know.
 */
export function decodeKeyStates(
  key: string,
  field: readonly (LineageStateJSON | NumberedStateJSON | number)[],
  windows: WindowArena,
  nameOf: (n: number) => string | undefined = () => undefined,
): StateList {
  const ops: unknown[] = [];
  try {
    return decodeEntries(key, field, windows, nameOf, ops);
  } catch (e) {
    for (const op of ops) if (isSmallWindow(op)) windows.free(op);
    throw e;
  }
}

/** {@link decodeKeyStates}, each operator state decoded pushed to `ops`. */
function decodeEntries(
  key: string,
  field: readonly (LineageStateJSON | NumberedStateJSON | number)[],
  windows: WindowArena,
  nameOf: (n: number) => string | undefined,
  ops: unknown[],
): StateList {
  const v3 = Array.isArray(field) && typeof field[0] === 'number';
  const base = v3 ? (field[0] as number) : 0;
  const from = v3 ? 1 : 0;
  // v6: a number after the entries is the key's expiry bucket.
  const exp = v3 && field.length > 2 ? field[field.length - 1] : undefined;
  const to = typeof exp === 'number' ? field.length - 1 : field.length;
  if (!Array.isArray(field) || to <= from)
    throw new SnapshotError(`keyed state of "${key}" is not a list of lineage states`);
  const list = new StateList();
  if (typeof exp === 'number') list.exp = exp;
  for (let i = from; i < to; i++) {
    const entry = field[i];
    if (!Array.isArray(entry))
      throw new SnapshotError(`keyed state of "${key}" is not a list of lineage states`);
    let sid: string, sup: unknown, json: unknown;
    if (typeof entry[0] === 'number') {
      const name = nameOf(entry[0]);
      if (name === undefined)
        throw new SnapshotError(
          `keyed state of "${key}" names lineage number ${entry[0]}, which the checkpoint's lineage list does not hold`,
        );
      [sid, json, sup] = [name, entry[1], entry[2]];
    } else [sid, sup, json] = entry as LineageStateJSON;
    let op: unknown;
    if (typeof json === 'number') {
      // v4: the same window as an earlier entry's: a copy of its own.
      const earlier = ops[json - 1] as SlidingState | SmallWindow | undefined;
      if (!Number.isInteger(json) || json < 1 || (!isSmallWindow(earlier) && earlier?.k !== 's'))
        throw new SnapshotError(
          `keyed state of "${key}": lineage ${sid} refers to entry ${json}, which holds no window`,
        );
      op = isSmallWindow(earlier) ? windows.copy(earlier) : copyWindow(earlier);
    } else if (Array.isArray(json))
      // No operator writes a list: refused, not misread.
      throw new SnapshotError(
        `keyed state of "${key}": lineage ${sid} holds a list where an operator state belongs`,
      );
    else op = opFromJSON(json, base, windows);
    ops.push(op);
    // A field never names a lineage twice; keeping one would leave the other's window unowned.
    if (list.has(sid))
      throw new SnapshotError(`keyed state of "${key}" holds lineage ${sid} twice`);
    list.add(sid, typeof sup === 'number' ? sup : undefined, op);
  }
  return list;
}

/** A restored window's own copy (its arrays are not shared). */
function copyWindow(s: SlidingState): SlidingState {
  return {
    ...s,
    t: orNone(s.t.slice()),
    v: orNone(s.v.slice()),
    fs: orNone(s.fs.slice()),
    mn: orNone(s.mn.slice()),
    mx: orNone(s.mx.slice()),
    d: s.d === undefined ? undefined : new Map(s.d),
  };
}

/**
 * The expiry bucket a checkpoint field records (v6: a number after its entries), read from the
 * end of its text without parsing the rest: a restore lists every key for expiry this way and
 * decodes a key only when the partition first needs it.
 */
export function fieldExpiry(text: string): number | undefined {
  const end = text.length - 1;
  const c = text.charCodeAt(end - 1);
  if (text.charCodeAt(end) !== 0x5d || c < 0x30 || c > 0x39) return undefined;
  const v = Number(text.slice(text.lastIndexOf(',', end) + 1, end));
  return Number.isSafeInteger(v) ? v : undefined;
}

/** {@link decodeKeyStates} from the field's text. */
export function decodeKeyStatesText(
  key: string,
  text: string,
  windows: WindowArena,
  nameOf?: (n: number) => string | undefined,
): StateList {
  let field: (LineageStateJSON | NumberedStateJSON | number)[];
  try {
    field = JSON.parse(text) as (LineageStateJSON | NumberedStateJSON | number)[];
  } catch (e) {
    throw new SnapshotError(`checkpointed state of key "${key}" is not JSON`, e);
  }
  return decodeKeyStates(key, field, windows, nameOf);
}
