/**
 * A partition's keyed state as the engine reads and writes it: keys restored from a checkpoint
 * and decoded when first needed, the one operator view filled before an operator runs and written
 * back after it, and the removal of states and whole lineages.
 */
import { newKeyState, type KeyState } from './cep/host.js';
import { isSmallWindow } from './cep/small-window.js';
import { patternIdle } from './cep/pattern-operators.js';
import type { CompiledRule } from './compile-rule.js';
import { decodeField, fieldMayHold } from './checkpoint-field.js';
import type { KeyStates, StateList } from './keyed-states.js';
import { lineageNumber } from './lineage-number.js';
import { expiryBucket, expiryOn } from './expiry.js';
import { stateEnd } from './state-end.js';
import type { PartitionState } from './partition-state.js';

/** Decodes a key restored from a checkpoint into `states` (see `PartitionState.raw`); its number, or -1. */
export function decodeRaw(st: PartitionState, key: string): number {
  const text = st.raw.get(key);
  if (text === undefined) return -1;
  const list = decodeField(key, text, st.windows, (n) => st.lineageIndex.nameOf(n));
  st.raw.delete(key);
  list.exp ??= st.legacyExpiry;
  return putKeyStates(st, key, list);
}

/** Puts a key's decoded states (every lineage of the key, which holds none yet) into the partition; its number. */
export function putKeyStates(st: PartitionState, key: string, list: StateList): number {
  const k = st.states.addKey(key);
  st.states.reserve(k, list.size);
  list.forEach((sid, sup, op) => {
    st.lineageKeys.set(sid, (st.lineageKeys.get(sid) ?? 0) + 1);
    st.states.add(k, lineageNumber(sid), sup, op);
  });
  st.states.setExp(k, list.exp);
  return k;
}

/** A key's number in `states`, decoded first if it was restored and not touched since; -1 when it holds no state. */
export function keyOfState(st: PartitionState, key: string): number {
  const k = st.states.keyNumber(key);
  return k >= 0 || st.raw.size === 0 ? k : decodeRaw(st, key);
}

/** The states of a decoded key (for encoders: valid until the next call); undefined when it holds none. */
export function statesOf(st: PartitionState, key: string): KeyStates | undefined {
  const k = st.states.keyNumber(key);
  return k < 0 ? undefined : st.states.statesOf(k);
}

/** Decodes every key restored and not touched since: for whole snapshots and counts. */
export function decodeAllKeys(st: PartitionState): void {
  for (const key of [...st.raw.keys()]) decodeRaw(st, key);
}

/**
 * The key whose states the hits of the event being released last looked up, and its number (-1:
 * it holds none yet): an event of a busy type meets dozens of rules, nearly all under its record's
 * key, so the key is looked up (and marked dirty) once per event instead of once per rule. Set and
 * cleared by `release` (release.ts) around one event's hits; cleared when the key leaves the partition.
 */
export const hitCache: { key: string | undefined; no: number } = { key: undefined, no: -1 };

/**
 * The operators' view of one (key, lineage) state: filled by {@link loadState} before an operator
 * runs and written back by {@link saveState} after it. One for the module: operators keep no
 * reference to it, and one state is worked on at a time.
 */
const view: KeyState = newKeyState();
/** The number of the key in {@link view} (-1: it holds no state yet) and the slot of its state (-1: none yet). */
let viewKey = -1;
let viewSlot = -1;

/** Loads `rule`'s state of `key` into the view; the key counts as changed. */
export function loadState(st: PartitionState, rule: CompiledRule, key: string): KeyState {
  let k: number;
  if (key === hitCache.key) k = hitCache.no;
  else {
    k = keyOfState(st, key);
    // Whoever asks for a key's state may change it.
    st.dirty.add(key);
  }
  return fillView(st, k, k < 0 ? -1 : st.states.find(k, rule.lin));
}

/** Points the view at key `k`'s state in slot `s` (-1 when there is none yet). */
export function fillView(st: PartitionState, k: number, s: number): KeyState {
  viewKey = k;
  viewSlot = s;
  view.sup = s < 0 ? undefined : st.states.sup(s);
  view.op = s < 0 ? undefined : st.states.op(s);
  return view;
}

/** Writes the view back after the operator ran: dropped when idle, else as it is stored. */
export function saveState(st: PartitionState, rule: CompiledRule, key: string, ks: KeyState): void {
  let k = viewKey;
  const s = viewSlot;
  viewKey = viewSlot = -1;
  if (isIdle(rule, ks)) {
    // An idle state holds no small window (one always holds an entry), and the operator freed
    // any it replaced: the stored state's handle, if any, is not the partition's any more.
    if (s >= 0) deleteSlot(st, k, s, false);
    return;
  }
  if (k < 0) {
    k = st.states.addKey(key);
    if (key === hitCache.key) hitCache.no = k;
  }
  // Under one rule version a sliding window's end and a suppression time only grow (with a
  // stateTtl too: the newest event only moves on): a state that was there already keeps the
  // key's listing (at or before its earlier end) valid. A state that is not idle, keeps no
  // suppression time and is not a sliding window (tumbling, sequence, absence) ends by its own
  // timers, unless a stateTtl ends it first (its newest event can go with a partial match the
  // timer drops, so its end is worked out at every write).
  const pk = rule.pattern;
  const endGrows = pk === undefined || (pk.kind === 'threshold' && !pk.tumbling);
  const exp = st.states.exp(k);
  const end =
    !expiryOn() ||
    (!endGrows && ks.sup === undefined && rule.stateTtlMs === 0) ||
    (endGrows && s >= 0 && exp !== undefined)
      ? Infinity
      : stateEnd(rule, ks.sup, ks.op, st.windows);
  if (end !== Infinity && end !== -Infinity) {
    const bucket = expiryBucket(end);
    if (exp === undefined || bucket < exp) {
      st.states.setExp(k, bucket);
      st.expiry.add(key, bucket);
    }
  }
  if (s >= 0) st.states.set(s, ks.sup, ks.op);
  else {
    const sid = rule.sid;
    st.lineageKeys.set(sid, (st.lineageKeys.get(sid) ?? 0) + 1);
    st.states.add(k, rule.lin, ks.sup, ks.op);
  }
}

/** Frees the small window an operator state is, if it is one: its state is being dropped. */
export function freeOp(st: PartitionState, op: unknown): void {
  if (isSmallWindow(op)) st.windows.free(op);
}

/**
 * Removes key `k`'s state in slot `s` (the key is already marked dirty by whoever touched it),
 * freeing its small window unless `free` is false (the caller's operator has dealt with it). The
 * key's later states move up a slot.
 */
export function deleteSlot(st: PartitionState, k: number, s: number, free = true): void {
  const sid = st.states.sid(s);
  if (free) freeOp(st, st.states.op(s));
  if (st.states.delete(k, s) && k === hitCache.no) {
    hitCache.key = undefined;
    hitCache.no = -1;
  }
  const n = (st.lineageKeys.get(sid) ?? 1) - 1;
  if (n > 0) st.lineageKeys.set(sid, n);
  else st.lineageKeys.delete(sid);
}

/** Drops a whole lineage, marking each of its keys for rewriting at the next checkpoint. */
export function dropLineage(st: PartitionState, sid: string): void {
  // Restored keys that may hold the lineage are decoded first (see `fieldMayHold`).
  if (st.raw.size > 0) {
    const number = st.lineageIndex.numberIfAny(sid);
    const holding: string[] = [];
    for (const [key, text] of st.raw) if (fieldMayHold(text, sid, number)) holding.push(key);
    for (const key of holding) decodeRaw(st, key);
  }
  // Its keys are rewritten by the next checkpoint, which also deletes the number.
  st.lineageIndex.release(sid);
  if (!st.lineageKeys.has(sid)) return;
  // A rare step (a rule deleted or reset): a walk over every key is fine here.
  const lin = lineageNumber(sid);
  const holding: [number, number][] = [];
  for (const key of st.states.keys()) {
    const k = st.states.keyNumber(key);
    const s = st.states.find(k, lin);
    if (s < 0) continue;
    st.dirty.add(key);
    holding.push([k, s]);
  }
  // One state of each key: removing it moves no other listed one.
  for (const [k, s] of holding) deleteSlot(st, k, s);
  st.lineageKeys.delete(sid);
}

/** The lineages that hold keyed state, e.g. `["velocity@3"]`. */
export function stateLineages(st: PartitionState): string[] {
  decodeAllKeys(st);
  return [...st.lineageKeys.keys()];
}

/**
 * What the partition's keyed state takes outside the collected heap (its typed arrays, see
 * `keyed-states.ts` and `small-window.ts`), and how much of it holds state now. The arrays grow
 * and do not shrink: after expiry let go of many keys, the difference is kept but unused.
 */
export function stateArenaBytes(st: PartitionState): { total: number; live: number } {
  return {
    total: st.states.bytes + st.windows.bytes,
    live: st.states.liveBytes + st.windows.liveBytes,
  };
}

/** How many (key, lineage) states the partition holds. */
export function keyedStateCount(st: PartitionState): number {
  decodeAllKeys(st);
  let n = 0;
  for (const c of st.lineageKeys.values()) n += c;
  return n;
}

export function isIdle(rule: CompiledRule, ks: KeyState): boolean {
  return ks.sup === undefined && patternIdle(rule, ks);
}
