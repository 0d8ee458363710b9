import { StateList, type KeyStates } from './keyed-states.js';
import { slidingWindow, type SlidingState } from './cep/threshold.js';
import {
  fitsSmallWindow,
  isSmallWindow,
  type SmallWindow,
  type WindowArena,
} from './cep/small-window.js';
import { SnapshotError } from './errors.js';
import {
  copyWindow,
  decodeKeyStatesText,
  freeingOnRefusal,
  opFromJSON,
  opToJSON,
  textFieldExpiry,
} from './key-state-json.js';
import type { LineageIndex } from './lineage-index.js';

/**
 * One key's checkpoint field (v7): every lineage state of the key, written straight from the
 * partition's records as a string of printable ASCII symbols, not as JSON text.
 *
 * Why: under load nearly every event changes a key the last checkpoint did not write, so a
 * checkpoint writes about one field per event, and writing them as JSON text (a number turned
 * into its decimal text, the pieces joined) was a large part of a worker's time. Here a field is
 * bytes put into one reused buffer and read off it once; restoring one reads the symbols back
 * without a JSON parse. The symbols are printable ASCII so that a field is a one-byte string,
 * stored in Redis as it is, with no step of its own in any store.
 *
 * Layout: `#`, the key's expiry bucket (a number, or `$` for none), then per state: its
 * lineage's number in the partition's {@link LineageIndex}, a kind symbol (`0` + 2 × kind +
 * 1 when a suppression time follows), the suppression time, and the kind's body:
 * - none: no body (the lineage holds no operator state);
 * - count or sum window: its size, its front end (two-stack sums), its timestamps, and for a sum
 *   window its values. Timestamps are written as the difference from the field's previous one;
 * - the same window as the field's entry `i` (from 1): `i` (rules of a type that key by the same
 *   key and met the same events hold equal windows);
 * - any other state (windows with min/max deques or distinct values, tumbling windows,
 *   sequences): the length of its JSON text, then the text.
 *
 * Numbers: an unsigned integer is written in base 32, low digits first, a digit that is not the
 * last as `<` + d (`<`…`[`) and the last as `_` + d (`_`…`~`). A signed integer in ±2^51 (not
 * -0) is zigzagged into an unsigned one (0, -1, 1, -2 → 0, 1, 2, 3). Any other number is `!`
 * and its 64 bits as two unsigned integers (high word, low word), so every number comes back
 * exactly, -0, non-finite and fractional ones too.
 */

/** The first symbol of a v7 field; text fields (v2 to v6) open with `[`. */
const V7 = 0x23; // '#'
/** A number written as its 64 bits. */
const F64 = 0x21; // '!'
/** No expiry bucket. */
const NONE = 0x24; // '$'
/** Digit d of a number, followed by more (`MORE + d`) or the last one (`LAST + d`). */
const MORE = 0x3c;
const LAST = 0x5f;
/** Entry kinds: the symbol is `KIND + 2 × kind + (1 when a suppression time follows)`. */
const KIND = 0x30;
const K_NONE = 0;
const K_COUNT = 1;
const K_SUMS = 2;
const K_REF = 3;
const K_JSON = 4;
/** Integers in ±2^51 are zigzagged: 2|x| fits a double exactly. */
const MAX_INT = 2 ** 51;

// The field being written: symbols in a reused buffer, and the pieces of JSON text between them.
let buf = Buffer.allocUnsafe(1 << 12);
let n = 0;
const pieces: string[] = [];
/** The previous timestamp written (or read): timestamps are written as differences from it. */
let prev = 0;
/**
 * The distinct plain windows of the field being written (the first few), and their positions:
 * a window equal to one of them is written as a reference to it.
 */
const written: (SlidingState | SmallWindow | undefined)[] = [
  undefined,
  undefined,
  undefined,
  undefined,
];
const writtenAt = [0, 0, 0, 0];
/** The small windows of the partition whose field is being written. */
let arena: WindowArena;
const word = new DataView(new ArrayBuffer(8));

function room(k: number): void {
  if (n + k <= buf.length) return;
  const b = Buffer.allocUnsafe(Math.max(buf.length * 2, n + k));
  buf.copy(b, 0, 0, n);
  buf = b;
}

function putUint(x: number): void {
  room(11);
  if (x < 0x80000000) {
    while (x >= 32) {
      buf[n++] = MORE + (x & 31);
      x >>>= 5;
    }
  } else
    while (x >= 32) {
      const d = x % 32;
      buf[n++] = MORE + d;
      x = (x - d) / 32;
    }
  buf[n++] = LAST + x;
}

function putF64(x: number): void {
  room(1);
  buf[n++] = F64;
  word.setFloat64(0, x, true);
  putUint(word.getUint32(4, true));
  putUint(word.getUint32(0, true));
}

const zigzags = (x: number): boolean =>
  Number.isInteger(x) && x <= MAX_INT && x >= -MAX_INT && (x !== 0 || 1 / x > 0);

function putNum(x: number): void {
  if (zigzags(x)) putUint(x >= 0 ? x * 2 : -x * 2 - 1);
  else putF64(x);
}

function putTime(t: number): void {
  const d = t - prev;
  if (Number.isSafeInteger(t) && Number.isSafeInteger(prev) && zigzags(d) && (t !== 0 || 1 / t > 0))
    putUint(d >= 0 ? d * 2 : -d * 2 - 1);
  else putF64(t);
  prev = t;
}

function putSymbol(c: number): void {
  room(1);
  buf[n++] = c;
}

/** Ends the symbols written so far as a piece of the field. */
function flush(): void {
  if (n > 0) pieces.push(buf.toString('latin1', 0, n));
  n = 0;
}

/**
 * A plain window: a small window, or a mutable one with no min/max deques or distinct values whose
 * values (a sum window's, one per entry; none for a count window) are written with its entries.
 */
function plain(op: unknown): op is SmallWindow | SlidingState {
  if (isSmallWindow(op)) return true;
  const s = op as SlidingState | undefined;
  return (
    s?.k === 's' &&
    s.mn.length === 0 &&
    s.mx.length === 0 &&
    !(s.d !== undefined && s.d.size > 0) &&
    (s.sums ? s.v.length === s.t.length : s.v.length <= s.h)
  );
}

/** Writes a plain window's body; false (and the caller takes back what it wrote) when an entry is not a number. */
function putWindow(w: SmallWindow | SlidingState): boolean {
  if (isSmallWindow(w)) {
    const size = arena.size(w);
    putUint(size);
    putUint(arena.front(w));
    for (let i = 0; i < size; i++) putTime(arena.time(w, i));
    if (arena.sums(w)) for (let i = 0; i < size; i++) putNum(arena.value(w, i));
    return true;
  }
  const h = w.h;
  putUint(w.t.length - h);
  putUint(Math.max(0, w.f - h));
  for (let i = h; i < w.t.length; i++) {
    const t = w.t[i];
    if (typeof t !== 'number') return false;
    putTime(t);
  }
  if (w.sums)
    for (let i = h; i < w.v.length; i++) {
      const x = w.v[i];
      if (typeof x !== 'number') return false;
      putNum(x);
    }
  return true;
}

/**
 * One key's states as its checkpoint field (see the layout above). Lineages are named by their
 * number in `index` (given now to those that have none).
 */
export function encodeField(states: KeyStates, index: LineageIndex, windows: WindowArena): string {
  arena = windows;
  n = 0;
  pieces.length = 0;
  prev = 0;
  putSymbol(V7);
  const exp = states.exp;
  if (exp === undefined) putSymbol(NONE);
  else putNum(exp);
  let nWritten = 0;
  for (let at = 1, size = states.size; at <= size; at++) {
    const i = at - 1;
    const lin = states.linAt(i);
    const number = index.numberByLin(lin);
    putUint(number > 0 ? number : index.numberForLin(lin, states.sidAt(i)));
    const sup = states.supAt(i);
    const op = states.opAt(i);
    let kind = K_JSON;
    let ref = 0;
    if (op === undefined) kind = K_NONE;
    else if (plain(op)) {
      for (let j = 0; j < nWritten && ref === 0; j++)
        if (sameWindow(op, written[j] as SlidingState | SmallWindow)) ref = writtenAt[j] as number;
      kind = ref > 0 ? K_REF : windowSums(op) ? K_SUMS : K_COUNT;
    }
    const mark = n;
    const marked = prev;
    putHead(kind, sup);
    if (kind === K_REF) putUint(ref);
    else if (kind === K_COUNT || kind === K_SUMS) {
      if (putWindow(op as SlidingState | SmallWindow)) {
        if (nWritten < written.length) {
          written[nWritten] = op as SlidingState | SmallWindow;
          writtenAt[nWritten++] = at;
        }
      } else {
        // An entry that is not a number: the state as JSON text instead.
        n = mark;
        prev = marked;
        putHead(K_JSON, sup);
        putJSON(op);
      }
    } else if (kind === K_JSON) putJSON(op);
  }
  flush();
  return pieces.length === 1 ? (pieces[0] as string) : pieces.join('');
}

function putHead(kind: number, sup: number | undefined): void {
  putSymbol(KIND + 2 * kind + (sup === undefined ? 0 : 1));
  if (sup !== undefined) putNum(sup);
}

function putJSON(op: unknown): void {
  const text = JSON.stringify(opToJSON(op, arena)) ?? 'null';
  putUint(text.length);
  flush();
  pieces.push(text);
}

/** Whether two plain windows hold the same entries (to the bit: -0 is not 0), sums flag and front end. */
function sameWindow(a: SlidingState | SmallWindow, b: SlidingState | SmallWindow): boolean {
  if (isSmallWindow(a) && isSmallWindow(b)) return arena.same(a, b);
  const size = windowSize(a);
  const sums = windowSums(a);
  if (sums !== windowSums(b) || size !== windowSize(b) || windowFront(a) !== windowFront(b))
    return false;
  for (let i = 0; i < size; i++) if (!Object.is(timeAt(a, i), timeAt(b, i))) return false;
  if (sums)
    for (let i = 0; i < size; i++) if (!Object.is(valueAt(a, i), valueAt(b, i))) return false;
  return true;
}

// A plain window's parts in either form, compacted: a small window's record, or a mutable
// window's arrays from its head.
const windowSize = (w: SlidingState | SmallWindow): number =>
  isSmallWindow(w) ? arena.size(w) : w.t.length - w.h;
const windowSums = (w: SlidingState | SmallWindow): boolean =>
  isSmallWindow(w) ? arena.sums(w) : w.sums;
const windowFront = (w: SlidingState | SmallWindow): number =>
  isSmallWindow(w) ? arena.front(w) : Math.max(0, w.f - w.h);
const timeAt = (w: SlidingState | SmallWindow, i: number): unknown =>
  isSmallWindow(w) ? arena.time(w, i) : w.t[w.h + i];
const valueAt = (w: SlidingState | SmallWindow, i: number): unknown =>
  isSmallWindow(w) ? arena.value(w, i) : w.v[w.h + i];

// Reading a field: the text and where in it.
let src = '';
let pos = 0;
let field = '';

/** Per lineage number, the count of fields read when a field last named it: a name read twice in one field is refused. */
const seenIn: number[] = [];
let fieldsRead = 0;

function damaged(what: string): never {
  throw new SnapshotError(
    `checkpointed state of key "${field}" is damaged at character ${pos}: expected ${what}; the stored checkpoint cannot be read, restore the partition from a good checkpoint or drop it`,
  );
}

function readUint(): number {
  let x = 0;
  let scale = 1;
  for (;;) {
    const c = src.charCodeAt(pos++);
    if (c >= LAST && c < LAST + 32) return x + (c - LAST) * scale;
    if (!(c >= MORE && c < MORE + 32) || scale > 2 ** 50) {
      pos--;
      return damaged('a number');
    }
    x += (c - MORE) * scale;
    scale *= 32;
  }
}

function readF64(): number {
  const hi = readUint();
  const lo = readUint();
  if (hi > 0xffffffff || lo > 0xffffffff) damaged('a 32-bit word');
  word.setUint32(4, hi, true);
  word.setUint32(0, lo, true);
  return word.getFloat64(0, true);
}

const unzigzag = (z: number): number => (z % 2 === 0 ? z / 2 : -(z + 1) / 2);

function readNum(): number {
  if (src.charCodeAt(pos) !== F64) return unzigzag(readUint());
  pos++;
  return readF64();
}

function readTime(): number {
  if (src.charCodeAt(pos) === F64) {
    pos++;
    prev = readF64();
  } else prev += unzigzag(readUint());
  return prev;
}

/** Reads an entry's kind symbol: `[kind, 1 when a suppression time follows]`. */
function readKind(): number {
  const c = src.charCodeAt(pos) - KIND;
  if (!(c >= 0 && c <= 2 * K_JSON + 1)) damaged('an entry kind');
  pos++;
  return c;
}

/** Reads a window's body (see {@link putWindow}): a small window in `windows` when it fits one. */
function readWindow(sums: boolean, windows: WindowArena): SmallWindow | SlidingState {
  const size = readUint();
  // Each entry takes a symbol at least: a larger size is damage, not a reason to allocate.
  if (size > src.length - pos) damaged('a window size');
  const f = readUint();
  if (f > size) damaged('a front end within the window');
  const t = new Array<number>(size);
  for (let i = 0; i < size; i++) t[i] = readTime();
  const v: number[] = sums ? new Array<number>(size) : [];
  if (sums) for (let i = 0; i < size; i++) v[i] = readNum();
  return fitsSmallWindow(t, v, sums, f)
    ? windows.make(t, v, sums, f)
    : slidingWindow(t, v, sums, f);
}

/** Reads a JSON body: the state's JSON value. */
function readJSON(): unknown {
  const len = readUint();
  if (len > src.length - pos) damaged('a JSON text within the field');
  const text = src.slice(pos, pos + len);
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    return damaged(`JSON text (${(e as Error).message})`);
  } finally {
    pos += len;
  }
}

/**
 * One key's states from its checkpoint field, of any version: v7 symbols, or v2 to v6 JSON text
 * (`decodeKeyStatesText`). Lineage numbers are looked up with `nameOf`; small windows are made in
 * `windows` (and freed again when the field is refused).
 * @throws SnapshotError naming the key when the field is damaged or names a lineage number `nameOf` does not know.
 */
export function decodeField(
  key: string,
  text: string,
  windows: WindowArena,
  nameOf: (n: number) => string | undefined = () => undefined,
): StateList {
  if (text.charCodeAt(0) !== V7) return decodeKeyStatesText(key, text, windows, nameOf);
  return freeingOnRefusal(windows, (ops) => readField(key, text, windows, nameOf, ops));
}

function readField(
  key: string,
  text: string,
  windows: WindowArena,
  nameOf: (n: number) => string | undefined,
  ops: unknown[],
): StateList {
  src = text;
  field = key;
  pos = 1;
  prev = 0;
  fieldsRead++;
  const list = new StateList();
  if (src.charCodeAt(pos) === NONE) pos++;
  else list.exp = readNum();
  if (pos >= src.length) damaged('a lineage state');
  while (pos < src.length) {
    const number = readUint();
    const sid = nameOf(number);
    if (sid === undefined)
      throw new SnapshotError(
        `keyed state of "${key}" names lineage number ${number}, which the checkpoint's lineage list does not hold`,
      );
    const c = readKind();
    const sup = (c & 1) === 1 ? readNum() : undefined;
    const kind = c >> 1;
    let op: unknown;
    if (kind === K_COUNT || kind === K_SUMS) op = readWindow(kind === K_SUMS, windows);
    else if (kind === K_REF) {
      const at = readUint();
      const earlier = ops[at - 1] as SlidingState | SmallWindow | undefined;
      if (at < 1 || at > ops.length || (!isSmallWindow(earlier) && earlier?.k !== 's'))
        throw new SnapshotError(
          `keyed state of "${key}": lineage ${sid} refers to entry ${at}, which holds no window`,
        );
      op = isSmallWindow(earlier) ? windows.copy(earlier) : copyWindow(earlier);
    } else if (kind === K_JSON) {
      const json = readJSON();
      // No operator writes a list: refused, not misread.
      if (Array.isArray(json))
        throw new SnapshotError(
          `keyed state of "${key}": lineage ${sid} holds a list where an operator state belongs`,
        );
      op = opFromJSON(json, 0, windows);
    }
    ops.push(op);
    // A field never names a lineage twice; keeping one would leave the other's window unowned.
    if (seenIn[number] === fieldsRead)
      throw new SnapshotError(`keyed state of "${key}" holds lineage ${sid} twice`);
    seenIn[number] = fieldsRead;
    list.add(sid, sup, op);
  }
  return list;
}

/**
 * The expiry bucket a checkpoint field records, read without decoding the field: a restore lists
 * every key for expiry this way and decodes a key only when the partition first needs it.
 * Undefined when the field records none (or is damaged: decoding it reports that).
 */
export function fieldExpiry(text: string): number | undefined {
  if (text.charCodeAt(0) !== V7) return textFieldExpiry(text);
  if (text.charCodeAt(1) === NONE) return undefined;
  src = text;
  pos = 1;
  try {
    const exp = readNum();
    return Number.isSafeInteger(exp) ? exp : undefined;
  } catch {
    return undefined;
  }
}

/** The kinds of state a v7 field's entry holds (see the layout above). */
export const FieldEntryKind = {
  none: 'none',
  count: 'count',
  sums: 'sums',
  ref: 'ref',
  json: 'json',
} as const;
export type FieldEntryKind = (typeof FieldEntryKind)[keyof typeof FieldEntryKind];
const KIND_NAMES = [
  FieldEntryKind.none,
  FieldEntryKind.count,
  FieldEntryKind.sums,
  FieldEntryKind.ref,
  FieldEntryKind.json,
] as const;

/**
 * A v7 field's entries, each its lineage number and kind, read without decoding their states:
 * what {@link fieldMayHold} looks for, and what a test or a tool inspecting a stored checkpoint
 * can count.
 * @throws SnapshotError when the field is not v7 or is damaged.
 */
export function fieldEntries(
  text: string,
): { readonly lineage: number; readonly kind: FieldEntryKind }[] {
  src = text;
  field = '';
  pos = 1;
  if (text.charCodeAt(0) !== V7) damaged('a v7 field');
  if (src.charCodeAt(pos) === NONE) pos++;
  else readNum();
  const out: { lineage: number; kind: FieldEntryKind }[] = [];
  while (pos < src.length) {
    const lineage = readUint();
    const c = readKind();
    const kind = c >> 1;
    out.push({ lineage, kind: KIND_NAMES[kind] as FieldEntryKind });
    if ((c & 1) === 1) readNum();
    if (kind === K_REF) readUint();
    else if (kind === K_JSON) {
      const len = readUint();
      if (len > src.length - pos) damaged('a JSON text within the field');
      pos += len;
    } else if (kind !== K_NONE) {
      const size = readUint();
      readUint();
      for (let i = 0; i < (kind === K_SUMS ? 2 * size : size); i++) readNum();
    }
  }
  return out;
}

/**
 * Whether a field may hold the lineage `sid`, whose number in the partition is `number` (if it
 * has one): to decode, before a lineage is dropped, only the restored keys that hold it. A v7
 * field's entries are read ({@link fieldEntries}); a text field is searched for the lineage's
 * quoted id (v4) or an entry opening with its number (v5: `,[n,`; a state's nested lists can look
 * alike, and decoding a key that does not hold the lineage changes nothing). A damaged field says
 * yes: decoding it reports the damage.
 */
export function fieldMayHold(text: string, sid: string, number: number | undefined): boolean {
  if (text.charCodeAt(0) !== V7)
    return text.includes(`"${sid}"`) || (number !== undefined && text.includes(`,[${number},`));
  if (number === undefined) return false;
  try {
    return fieldEntries(text).some((e) => e.lineage === number);
  } catch {
    return true;
  }
}
