/**
 * A partition's keyed state: (key, lineage) → state, held in typed arrays.
 *
 * A partition holds millions of (key, lineage) states, and keys keep arriving: an event of a new
 * key meets a few dozen rules, each a new state. Held as a `Map` of keys to a collection per key,
 * every new state grew a per-key array or hash table, and those young objects were most of what a
 * worker's scavenges copied (bench/README.md). Here each key holds one block of records in a
 * `Float64Array` (its states in the order its lineages were added), and a record is
 * `[lineage number, suppression time, small window]`: numbers the garbage collector neither copies
 * nor marks. The operator state is usually a small window, whose handle the record holds (see
 * `small-window.ts`); the rarer states that are objects are referenced from one array beside the
 * records. A key is one entry of one `Map` (key → number). A key's block has room for a power of
 * two of records and moves to one twice the size when full; blocks are reused by size.
 *
 * A state is found by scanning its key's block for the lineage's number, from just after the one
 * found last: the hits of an event come in rule order, and a key's lineages were added in the
 * order its rules first met it, so the next one asked for is nearly always the next record.
 *
 * A state's position (its "slot") is valid until its key's states change: adding a state can
 * move the block, and removing one moves the states after it.
 */

import { lineageNumber, lineageOf } from './lineage-number.js';

/**
 * One key's states, as encoders read them: by position, in the order the key's lineages were
 * added (a loop over positions makes no closure per field; checkpoints read one per changed key).
 */
export interface KeyStates {
  /** The key's expiry bucket (see `ExpiryQueue`); undefined when no state of it ends by itself. */
  readonly exp: number | undefined;
  readonly size: number;
  sidAt(i: number): string;
  /** The lineage's number in this thread (`lineageNumber`). */
  linAt(i: number): number;
  supAt(i: number): number | undefined;
  opAt(i: number): unknown;
  /** Calls `fn` for each state, in order. */
  forEach(fn: (sid: string, sup: number | undefined, op: unknown) => void): void;
}

/** A record: lineage number, suppression time (NaN: none), small window handle (-1: none). */
const REC = 3;
const LIN = 0;
const SUP = 1;
const WIN = 2;
/** Size classes of blocks: room for 2^c records. */
const CLASSES = 31;

export class KeyedStates {
  private readonly numbers = new Map<string, number>();
  private names: (string | undefined)[] = [];
  private readonly freeKeys: number[] = [];
  /** Per key number: where its block starts, its size class, how many states it holds, its expiry bucket. */
  private start = new Int32Array(16);
  private cls = new Int8Array(16);
  private count = new Int32Array(16);
  private expiry = new Float64Array(16);

  private rec = new Float64Array(64 * REC);
  /** The operator state of a record that is not a small window (undefined: none). */
  private readonly objs: unknown[] = [];
  /** Records handed out at least once. */
  private used = 0;
  /** Freed blocks by size class. */
  private readonly freeBlocks: number[][] = Array.from({ length: CLASSES }, () => []);
  private live = 0;
  /** The slot {@link find} found last, and its key (see the file's comment); -1: none. */
  private hint = -1;
  private hintKey = -1;

  private readonly cursor: Cursor;

  constructor() {
    this.cursor = new Cursor(this);
  }

  /** Keys that hold state. */
  get size(): number {
    return this.numbers.size;
  }

  /** (key, lineage) states held. */
  get states(): number {
    return this.live;
  }

  /** Bytes the typed arrays take (in use or not). */
  get bytes(): number {
    return (
      this.rec.byteLength +
      this.start.byteLength +
      this.cls.byteLength +
      this.count.byteLength +
      this.expiry.byteLength
    );
  }

  /** Bytes of the records of the states held and of the keys' numbers in use. */
  get liveBytes(): number {
    return this.live * REC * 8 + this.numbers.size * 17;
  }

  /** The keys that hold state, in the order each was first given one. */
  keys(): IterableIterator<string> {
    return this.numbers.keys();
  }

  /** The key's number; -1 when it holds no state. */
  keyNumber(key: string): number {
    return this.numbers.get(key) ?? -1;
  }

  /** The key's number, given one (with no state yet) if it has none. */
  addKey(key: string): number {
    let k = this.numbers.get(key);
    if (k !== undefined) return k;
    k = this.freeKeys.pop() ?? this.names.length;
    if (k === this.names.length) {
      this.names.push(key);
      if (k === this.start.length) this.growKeys();
    } else this.names[k] = key;
    this.numbers.set(key, k);
    this.start[k] = -1;
    this.cls[k] = 0;
    this.count[k] = 0;
    this.expiry[k] = NaN;
    return k;
  }

  /** How many states key `k` holds. */
  stateCount(k: number): number {
    return this.count[k] as number;
  }

  /** The slot of key `k`'s first state; its others follow it (see {@link stateCount}). */
  first(k: number): number {
    return this.start[k] as number;
  }

  /** Key `k`'s expiry bucket (see {@link KeyStates.exp}). */
  exp(k: number): number | undefined {
    const e = this.expiry[k] as number;
    return e === e ? e : undefined;
  }

  setExp(k: number, bucket: number | undefined): void {
    this.expiry[k] = bucket ?? NaN;
  }

  /** Key `k`'s states for an encoder: one reused object, valid until the next call. */
  statesOf(k: number): KeyStates {
    this.cursor.k = k;
    return this.cursor;
  }

  /** The slot of key `k`'s state in lineage `lin` (see `lineageNumber`); -1 when it holds none. */
  find(k: number, lin: number): number {
    const rec = this.rec;
    const from = this.start[k] as number;
    const to = from + (this.count[k] as number);
    const h = this.hintKey === k ? this.hint + 1 : from;
    for (let s = h; s < to; s++)
      if (rec[s * REC + LIN] === lin) {
        this.hint = s;
        this.hintKey = k;
        return s;
      }
    for (let s = from; s < h && s < to; s++)
      if (rec[s * REC + LIN] === lin) {
        this.hint = s;
        this.hintKey = k;
        return s;
      }
    return -1;
  }

  sid(s: number): string {
    return lineageOf(this.rec[s * REC + LIN] as number);
  }

  lin(s: number): number {
    return this.rec[s * REC + LIN] as number;
  }

  sup(s: number): number | undefined {
    const x = this.rec[s * REC + SUP] as number;
    return x === x ? x : undefined;
  }

  op(s: number): unknown {
    const w = this.rec[s * REC + WIN] as number;
    return w >= 0 ? w : this.objs[s];
  }

  /** Sets a state's suppression time and operator state. */
  set(s: number, sup: number | undefined, op: unknown): void {
    this.rec[s * REC + SUP] = sup ?? NaN;
    this.putOp(s, op);
  }

  /**
   * Adds key `k`'s state in lineage `lin` (see `lineageNumber`; the key holds none in it: the
   * caller has just looked), last in the key's order. Returns its slot.
   */
  add(k: number, lin: number, sup: number | undefined, op: unknown): number {
    const n = this.count[k] as number;
    if (this.start[k] === -1 || n === 1 << (this.cls[k] as number))
      this.moveBlock(k, n === 0 ? 1 : n * 2);
    const s = (this.start[k] as number) + n;
    this.count[k] = n + 1;
    this.rec[s * REC + LIN] = lin;
    this.rec[s * REC + SUP] = sup ?? NaN;
    this.putOp(s, op);
    this.live++;
    return s;
  }

  /** Makes room for key `k` to hold `n` states without moving its block again. */
  reserve(k: number, n: number): void {
    if (n > (this.start[k] === -1 ? 0 : 1 << (this.cls[k] as number))) this.moveBlock(k, n);
  }

  /**
   * Removes key `k`'s state in slot `s`; the states after it in the key's order move up one slot.
   * When it was the key's last, the key goes too (its number may be given to another key):
   * returns true then.
   */
  delete(k: number, s: number): boolean {
    const rec = this.rec;
    const end = (this.start[k] as number) + (this.count[k] as number);
    for (let i = s * REC, to = (end - 1) * REC; i < to; i++) rec[i] = rec[i + REC] as number;
    // The array of objects is only as long as the last record that held one: not written past it.
    const objs = this.objs;
    const last = Math.min(end, objs.length) - 1;
    for (let i = s; i < last; i++) objs[i] = objs[i + 1];
    // Dropped, so that a state object is not kept alive by a free record.
    if (last >= s) objs[last] = undefined;
    this.hint = this.hintKey = -1;
    this.live--;
    const left = (this.count[k] as number) - 1;
    this.count[k] = left;
    if (left > 0) return false;
    (this.freeBlocks[this.cls[k] as number] as number[]).push(this.start[k] as number);
    this.numbers.delete(this.names[k] as string);
    this.names[k] = undefined;
    this.freeKeys.push(k);
    return true;
  }

  private putOp(s: number, op: unknown): void {
    if (typeof op === 'number') {
      this.rec[s * REC + WIN] = op;
      if (this.objs[s] !== undefined) this.objs[s] = undefined;
    } else {
      this.rec[s * REC + WIN] = -1;
      // Written only when it changes (or a record beyond the array's end): most records hold a
      // small window and leave the array's slot undefined.
      if (s >= this.objs.length) {
        while (this.objs.length < s) this.objs.push(undefined);
        this.objs.push(op);
      } else if (this.objs[s] !== op) this.objs[s] = op;
    }
  }

  /** Gives key `k` a block with room for `room` records (a power of two), its states moved there. */
  private moveBlock(k: number, room: number): void {
    let c = 0;
    while (1 << c < room) c++;
    const from = this.start[k] as number;
    const n = this.count[k] as number;
    const to = this.allocBlock(c);
    const rec = this.rec;
    for (let i = 0; i < n * REC; i++) rec[to * REC + i] = rec[from * REC + i] as number;
    for (let i = 0; i < n; i++) {
      const o = this.objs[from + i];
      if (o !== undefined) {
        this.putOp(to + i, o);
        this.objs[from + i] = undefined;
      }
    }
    if (from >= 0) (this.freeBlocks[this.cls[k] as number] as number[]).push(from);
    this.start[k] = to;
    this.cls[k] = c;
    this.hint = this.hintKey = -1;
  }

  private allocBlock(c: number): number {
    const free = this.freeBlocks[c] as number[];
    if (free.length > 0) return free.pop() as number;
    const at = this.used;
    this.used += 1 << c;
    if (this.used * REC > this.rec.length) {
      let n = this.rec.length;
      while (this.used * REC > n) n *= 2;
      const grown = new Float64Array(n);
      grown.set(this.rec);
      this.rec = grown;
    }
    return at;
  }

  private growKeys(): void {
    const n = this.start.length * 2;
    this.start = grown(this.start, n);
    this.cls = grown(this.cls, n);
    this.count = grown(this.count, n);
    this.expiry = grown(this.expiry, n);
  }
}

/** A key's states as {@link KeyStates}, for encoders. */
class Cursor implements KeyStates {
  k = -1;
  constructor(private readonly table: KeyedStates) {}

  get exp(): number | undefined {
    return this.table.exp(this.k);
  }

  get size(): number {
    return this.table.stateCount(this.k);
  }

  sidAt(i: number): string {
    return this.table.sid(this.table.first(this.k) + i);
  }

  linAt(i: number): number {
    return this.table.lin(this.table.first(this.k) + i);
  }

  supAt(i: number): number | undefined {
    return this.table.sup(this.table.first(this.k) + i);
  }

  opAt(i: number): unknown {
    return this.table.op(this.table.first(this.k) + i);
  }

  forEach(fn: (sid: string, sup: number | undefined, op: unknown) => void): void {
    const t = this.table;
    const from = t.first(this.k);
    for (let s = from, end = from + t.stateCount(this.k); s < end; s++)
      fn(t.sid(s), t.sup(s), t.op(s));
  }
}

function grown<A extends Int8Array | Int32Array | Float64Array>(a: A, n: number): A {
  const b = new (a.constructor as new (n: number) => A)(n);
  b.set(a);
  return b;
}

/**
 * One key's states outside a partition: a decoded checkpoint field, or states put together by
 * hand (tests).
 */
export class StateList implements KeyStates {
  exp: number | undefined = undefined;
  readonly sids: string[] = [];
  readonly sups: (number | undefined)[] = [];
  readonly ops: unknown[] = [];

  constructor(entries?: Iterable<readonly [string, number | undefined, unknown]>) {
    if (entries !== undefined) for (const [sid, sup, op] of entries) this.add(sid, sup, op);
  }

  get size(): number {
    return this.sids.length;
  }

  has(sid: string): boolean {
    return this.sids.includes(sid);
  }

  /** The operator state of lineage `sid`; undefined when the list holds none. */
  op(sid: string): unknown {
    return this.ops[this.sids.indexOf(sid)];
  }

  sup(sid: string): number | undefined {
    return this.sups[this.sids.indexOf(sid)];
  }

  sidAt(i: number): string {
    return this.sids[i] as string;
  }

  linAt(i: number): number {
    return lineageNumber(this.sids[i] as string);
  }

  supAt(i: number): number | undefined {
    return this.sups[i];
  }

  opAt(i: number): unknown {
    return this.ops[i];
  }

  add(sid: string, sup: number | undefined, op: unknown): void {
    this.sids.push(sid);
    this.sups.push(sup);
    this.ops.push(op);
  }

  forEach(fn: (sid: string, sup: number | undefined, op: unknown) => void): void {
    for (let i = 0; i < this.sids.length; i++)
      fn(this.sids[i] as string, this.sups[i], this.ops[i]);
  }
}
