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
import type { EventRef } from './types.js';

/**
 * Keyed state to and from JSON: one key's states (every rule lineage of the key) as snapshots
 * write them, the operator states inside, and the checkpoint fields of v2 to v6, which were JSON
 * text (still read: a partition's fields stay as they are until their key is written again).
 * Checkpoints now write fields of their own (`checkpoint-field.ts`), holding as JSON only the
 * rarer operator states.
 */

/** One lineage's state of a key. */
export type LineageStateJSON = [lineage: string, sup: number | null, op: unknown];
/** v5 checkpoint fields: one lineage's state of a key, the lineage by its number (see LineageIndex). */
export type NumberedStateJSON = [lineage: number, op: unknown, sup?: number];

/** Non-finite numbers and -0 as strings: JSON would turn them into null and 0. */
const enc = (x: number): number | string =>
  Object.is(x, -0) ? '-0' : Number.isFinite(x) ? x : String(x);
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
  return freeingOnRefusal(windows, (ops) => decodeEntries(key, field, windows, nameOf, ops));
}

/**
 * Runs a field's decoder, which pushes each operator state it decodes to `ops`: when it refuses
 * the field, the small windows decoded so far are freed (no window is left without an owner).
 */
export function freeingOnRefusal(
  windows: WindowArena,
  decode: (ops: unknown[]) => StateList,
): StateList {
  const ops: unknown[] = [];
  try {
    return decode(ops);
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
export function copyWindow(s: SlidingState): SlidingState {
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
 * The expiry bucket a text field records (v6: a number after its entries), read from the end of
 * its text without parsing the rest (see `fieldExpiry`).
 */
export function textFieldExpiry(text: string): number | undefined {
  const end = text.length - 1;
  const c = text.charCodeAt(end - 1);
  if (text.charCodeAt(end) !== 0x5d || c < 0x30 || c > 0x39) return undefined;
  const v = Number(text.slice(text.lastIndexOf(',', end) + 1, end));
  return Number.isSafeInteger(v) ? v : undefined;
}

/** {@link decodeKeyStates} from a text field's text (v2 to v6). */
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
