import { absenceEvent, absenceIdle, absenceTimer } from './cep/absence.js';
import { Heap } from './cep/heap.js';
import {
  newKeyState,
  type AlertDraft,
  type KeyState,
  type OperatorEvent,
  type OperatorHost,
} from './cep/host.js';
import { isSmallWindow, WindowArena } from './cep/small-window.js';
import { sequenceEvent, sequenceIdle, sequenceTimer } from './cep/sequence.js';
import { thresholdEvent, thresholdIdle, thresholdTimer } from './cep/threshold.js';
import { alertId } from './alert.js';
import type { CompiledRule } from './compile-rule.js';
import { RuleEvaluationError } from './errors.js';
import { InvalidReason, parseEvent } from './event.js';
import { decodeField, fieldMayHold } from './checkpoint-field.js';
import { LineageIndex } from './lineage-index.js';
import { KeyedStates, type KeyStates, type StateList } from './keyed-states.js';
import { lineageNumber } from './lineage-number.js';
import { DEFAULT_LIMITS, type RuleLimits } from './limits.js';
import { keySpaceOf } from './rule-key.js';
import { Downstream, rekeyed, type Forward, type RekeyOptions } from './downstream.js';
import { expiryBucket, expiryOn, ExpiryQueue, ExpiryReason } from './expiry.js';
import { stateEnd } from './state-end.js';
import type { RuleSet } from './rule-set.js';
import type { Alert, EventRef } from './types.js';
import { EXPECTED, Hits, keyOf, LazyContext, ruleVerdict, TRIGGER } from './verdict.js';

export { Hits, type Hit } from './verdict.js';

/** One record of a partition's log, in log order. */
export type PartitionRecord =
  /** An event; `data` is the payload (bytes, text, or an already parsed object). */
  | {
      readonly kind: 'event';
      readonly seq: number;
      readonly key: string;
      readonly data: unknown;
      readonly publishTs: number;
    }
  /** An epoch marker: from here on, `ruleSet` (the rules after `CONTROL` sequence `ruleSet.controlSeq`) is in force. */
  | { readonly kind: 'marker'; readonly seq: number; readonly ruleSet: RuleSet }
  /**
   * A time tick for an idle partition: no event older than `ts − outOfOrderMs` will come.
   * `storedAt` is when the log stored it: given, a tick more than `maxEventFutureMs` ahead of it is
   * refused, and a tick moves event time no further than it (as an event does).
   */
  | {
      readonly kind: 'tick';
      readonly seq: number;
      readonly ts: number;
      readonly storedAt?: number;
    }
  /**
   * Downstream of a re-keying hop (see `downstream.ts`): an event source partition `src`
   * forwarded, judged there under `ruleSet`, with the source's watermark after it.
   */
  | {
      readonly kind: 'forward';
      readonly seq: number;
      readonly src: number;
      readonly srcSeq: number;
      readonly ruleSet: RuleSet;
      readonly watermark: number;
      readonly key: string;
      readonly data: unknown;
      readonly publishTs: number;
    }
  /**
   * Downstream: source partition `src`'s watermark, the rule set in force there and its horizon
   * (see {@link sourceHorizon}). A source reports at each epoch marker it applies, so the first
   * report of a rule set carries the horizon at its marker; it may report more often.
   */
  | {
      readonly kind: 'report';
      readonly seq: number;
      readonly src: number;
      readonly ruleSet: RuleSet;
      readonly watermark: number;
      readonly horizon: number;
    };

export interface PartitionOptions {
  readonly partition: number;
  /** Bounded out-of-orderness: events may arrive up to this much behind the newest one. Default 0. */
  readonly outOfOrderMs?: number;
  readonly limits?: RuleLimits;
  /** Given, the partition forwards the events of re-keyed rules instead of judging them (see `downstream.ts`). */
  readonly rekey?: RekeyOptions;
}

/** A downstream partition of key space `space`, fed by `sources` source partitions. */
export interface DownstreamOptions {
  readonly partition: number;
  readonly space: string;
  readonly sources: number;
  readonly limits?: RuleLimits;
}

export interface LateEvent {
  readonly seq: number;
  readonly ts: number;
  readonly watermark: number;
}
export interface InvalidEvent {
  readonly seq: number;
  readonly reason: InvalidReason;
  readonly message: string;
}
export interface RuleError {
  readonly seq: number;
  readonly ruleId: string;
  readonly error: RuleEvaluationError;
  /** The event the rule failed on (it may have been buffered: not always the record just processed). */
  readonly event: Readonly<Record<string, unknown>>;
}
export interface Overflow {
  readonly ruleId: string;
  readonly key: string;
  readonly dropped: number;
  readonly limit: string;
}

/** What one record produced. Nothing is dropped silently: every event is judged, late, or invalid. */
export interface ProcessResult {
  readonly alerts: Alert[];
  readonly late: LateEvent[];
  readonly invalid: InvalidEvent[];
  readonly errors: RuleError[];
  readonly overflows: Overflow[];
  /** Ids of the rules whose `when` accepted the event (before any pattern), in rule order. */
  readonly matched: string[];
  /** Ids of the rules of the event's type it did not meet because it lacks their `key` field (or holds no string or number there). */
  readonly keyMissing: string[];
  /** The event as forwarded to the key spaces of its re-keyed rules, one per key space. */
  readonly forwards: Forward[];
  /** Alerts held back by `alert.suppressFor`. */
  suppressed: number;
  /** The control sequence a marker brought into force. */
  applied: number | undefined;
}

export interface Buffered {
  readonly ts: number;
  /** The event's position in its partition's log (downstream: in its source's), which orders events of one time and names them in alerts. */
  readonly seq: number;
  /** Downstream: the position of the forwarded record in the partition's own log, which checkpoints go by. */
  readonly pos?: number;
  readonly id: string | undefined;
  /**
   * The record's key (its subject's), which rules without a `key` field judge the event under:
   * checkpoints store it, and restore recomputes the hits from the event. Undefined when the
   * event came as an object (its JSON copy may judge differently) or from a v2 checkpoint:
   * checkpoints store its hits instead.
   */
  readonly key: string | undefined;
  readonly event: Readonly<Record<string, unknown>>;
  /** The JSON text the event was parsed from, if it came as text or bytes: checkpoints store it as it is. */
  readonly text: string | undefined;
  /** Whether the event holds a hostile object, as parsing found: operators need not look again. */
  readonly hostile: boolean;
  readonly ruleSet: RuleSet;
  readonly hits: Hits;
}

export interface Timer {
  readonly time: number;
  readonly n: number;
  readonly ruleId: string;
  readonly epoch: number;
  readonly key: string;
}

/**
 * Everything a partition knows: the rule set in force, the reorder buffer, keyed state, timers
 * and the watermark. Changed in place by {@link processRecord}; serialised by `snapshotPartition`.
 */
export interface PartitionState {
  readonly partition: number;
  readonly outOfOrderMs: number;
  readonly limits: RuleLimits;
  /** Whether the partition forwards the events of re-keyed rules (see `downstream.ts`). */
  readonly rekey: boolean;
  /** With `rekey`: the key space of the partition key, whose rules stay here. */
  readonly localSpace: string | undefined;
  /** A downstream partition's sources and changes; undefined for a partition of the event log. */
  readonly down: Downstream | undefined;
  ruleSet: RuleSet;
  /** Sequence of the last record processed. */
  offset: number;
  maxTs: number;
  /** The latest time of an event judged here (it may run ahead of `maxTs`, which the log's clock caps). */
  maxEventTs: number;
  /** Every event at or before this time has been seen; an event at or before it is late. */
  watermark: number;
  readonly buffer: Heap<Buffered>;
  /** Rule sets still referenced by buffered events, with their counts (the current one included). */
  readonly tags: Map<RuleSet, number>;
  /**
   * Hits per lineage of the buffered events judged under an earlier rule set than the current
   * one: a lineage the current rules no longer use lives while such hits wait for it. Events
   * judged under the current rule set are not counted (their lineages are the current rules'):
   * counting every hit of every event cost two map updates per hit.
   */
  readonly hitCounts: Map<string, number>;
  /** Keys whose state (in any lineage) changed since the last checkpoint delta. */
  readonly dirty: Set<string>;
  /**
   * Buffered events are checkpointed in chunks, one per checkpoint that buffered any: the events
   * buffered up to this sequence are in the store. Events enter the buffer in log order, so the
   * next chunk holds the buffered events after it.
   */
  bufferCheckpointed: number;
  /**
   * The chunks of buffered events in the store: field → the latest event time in the chunk. Every
   * buffered event is later than the watermark, so a chunk whose latest time the watermark has
   * reached holds released events only, and the next checkpoint deletes it.
   */
  readonly bufferChunks: Map<string, number>;
  /**
   * Keyed state: (key, lineage (`ruleId@epoch`)) → state, each key's states together because an
   * event touches one key in several rules: a checkpoint then writes one field per changed key.
   */
  readonly states: KeyedStates;
  /**
   * Keyed state restored from a checkpoint and not touched since, as the field text it was read
   * as: key → text. A key is decoded into `states` when the partition first needs it, so a
   * restored partition reads again as soon as its checkpoint is read. A key is in `states` or
   * here, never both.
   */
  readonly raw: Map<string, string>;
  /** How many decoded keys hold state in each lineage. */
  readonly lineageKeys: Map<string, number>;
  /** The numbers checkpoint fields name lineages by (v5). */
  readonly lineageIndex: LineageIndex;
  readonly timers: Heap<Timer>;
  timerN: number;
  /** Keys to look at for expiry, by bucket of event time (see `ExpiryQueue`). */
  readonly expiry: ExpiryQueue;
  /**
   * The expiry bucket of keys restored from fields that record none (written before checkpoint
   * format v6), until it has come: a key decoded meanwhile is listed there.
   */
  legacyExpiry: number | undefined;
  /** (key, lineage) states removed by expiry since the partition was made or restored, by reason (for metrics). */
  readonly expired: Record<ExpiryReason, number>;
  /**
   * The partition's small windows: the states that hold one hold its handle. Every place that
   * drops such a state frees the handle (see {@link freeOp}).
   */
  readonly windows: WindowArena;
}

export const bufferOrder = (a: Buffered, b: Buffered): boolean =>
  a.ts < b.ts || (a.ts === b.ts && a.seq < b.seq);
export const timerOrder = (a: Timer, b: Timer): boolean =>
  a.time < b.time || (a.time === b.time && a.n < b.n);

/** A new partition with the given rule set in force. */
export function createPartition(ruleSet: RuleSet, options: PartitionOptions): PartitionState {
  const outOfOrderMs = options.outOfOrderMs ?? 0;
  if (!Number.isSafeInteger(outOfOrderMs) || outOfOrderMs < 0)
    throw new RangeError(`outOfOrderMs must be a non-negative integer, got ${outOfOrderMs}`);
  const pk = options.rekey?.partitionKey;
  return newState(ruleSet, options.partition, outOfOrderMs, options.limits, {
    rekey: options.rekey !== undefined,
    localSpace: pk === undefined ? undefined : keySpaceOf(pk),
    down: undefined,
  });
}

/**
 * A new downstream partition of a re-keying hop (see `downstream.ts`). Its rule set in force
 * starts empty and follows the changes its sources report; its events bring their own.
 */
export function createDownstream(ruleSet: RuleSet, options: DownstreamOptions): PartitionState {
  return newState(ruleSet, options.partition, 0, options.limits, {
    rekey: false,
    localSpace: undefined,
    down: new Downstream(options.space, options.sources),
  });
}

function newState(
  ruleSet: RuleSet,
  partition: number,
  outOfOrderMs: number,
  limits: RuleLimits | undefined,
  hop: Pick<PartitionState, 'rekey' | 'localSpace' | 'down'>,
): PartitionState {
  return {
    partition,
    outOfOrderMs,
    limits: limits ?? DEFAULT_LIMITS,
    rekey: hop.rekey,
    localSpace: hop.localSpace,
    down: hop.down,
    ruleSet,
    offset: 0,
    maxTs: -Infinity,
    maxEventTs: -Infinity,
    watermark: -Infinity,
    buffer: new Heap(bufferOrder),
    tags: new Map(),
    hitCounts: new Map(),
    dirty: new Set(),
    bufferCheckpointed: 0,
    bufferChunks: new Map(),
    states: new KeyedStates(),
    raw: new Map(),
    lineageKeys: new Map(),
    lineageIndex: new LineageIndex(),
    timers: new Heap(timerOrder),
    timerN: 0,
    expiry: new ExpiryQueue(),
    legacyExpiry: undefined,
    expired: { window: 0, suppression: 0, ttl: 0 },
    windows: new WindowArena(),
  };
}

/**
 * The empty list every result starts with: most records produce nothing, and six fresh arrays per
 * record were a good part of what the young generation collected. Frozen, so a consumer that
 * writes to a result's list fails loudly; {@link add} replaces it first.
 */
const NONE: never[] = Object.freeze([]) as unknown as never[];

type Lists =
  'alerts' | 'late' | 'invalid' | 'errors' | 'overflows' | 'matched' | 'keyMissing' | 'forwards';
type MutableResult = { -readonly [K in keyof ProcessResult]: ProcessResult[K] };

function newResult(): ProcessResult {
  return {
    alerts: NONE,
    late: NONE,
    invalid: NONE,
    errors: NONE,
    overflows: NONE,
    matched: NONE,
    keyMissing: NONE,
    forwards: NONE,
    suppressed: 0,
    applied: undefined,
  };
}

/** Appends to one of a result's lists, giving it an array of its own first. */
function add<K extends Lists>(out: ProcessResult, list: K, x: ProcessResult[K][number]): void {
  const a = out[list] as unknown[];
  if (a === NONE) (out as MutableResult)[list] = [x] as MutableResult[K];
  else a.push(x);
}

/** Decodes a key restored from a checkpoint into `states` (see `PartitionState.raw`); its number, or -1. */
function decodeRaw(st: PartitionState, key: string): number {
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
function keyOfState(st: PartitionState, key: string): number {
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
 * cleared by {@link release} around one event's hits; cleared when the key leaves the partition.
 */
let hitKey: string | undefined;
let hitKeyNo = -1;

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
function loadState(st: PartitionState, rule: CompiledRule, key: string): KeyState {
  let k: number;
  if (key === hitKey) k = hitKeyNo;
  else {
    k = keyOfState(st, key);
    // Whoever asks for a key's state may change it.
    st.dirty.add(key);
  }
  return fillView(st, k, k < 0 ? -1 : st.states.find(k, rule.lin));
}

/** Points the view at key `k`'s state in slot `s` (-1 when there is none yet). */
function fillView(st: PartitionState, k: number, s: number): KeyState {
  viewKey = k;
  viewSlot = s;
  view.sup = s < 0 ? undefined : st.states.sup(s);
  view.op = s < 0 ? undefined : st.states.op(s);
  return view;
}

/** Writes the view back after the operator ran: dropped when idle, else as it is stored. */
function saveState(st: PartitionState, rule: CompiledRule, key: string, ks: KeyState): void {
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
    if (key === hitKey) hitKeyNo = k;
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
function freeOp(st: PartitionState, op: unknown): void {
  if (isSmallWindow(op)) st.windows.free(op);
}

/**
 * Removes key `k`'s state in slot `s` (the key is already marked dirty by whoever touched it),
 * freeing its small window unless `free` is false (the caller's operator has dealt with it). The
 * key's later states move up a slot.
 */
function deleteSlot(st: PartitionState, k: number, s: number, free = true): void {
  const sid = st.states.sid(s);
  if (free) freeOp(st, st.states.op(s));
  if (st.states.delete(k, s) && k === hitKeyNo) {
    hitKey = undefined;
    hitKeyNo = -1;
  }
  const n = (st.lineageKeys.get(sid) ?? 1) - 1;
  if (n > 0) st.lineageKeys.set(sid, n);
  else st.lineageKeys.delete(sid);
}

/** Drops a whole lineage, marking each of its keys for rewriting at the next checkpoint. */
function dropLineage(st: PartitionState, sid: string): void {
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

/** The operator host of a partition, made once and pointed at each record's result. */
interface Host extends OperatorHost {
  out: ProcessResult;
}
const hosts = new WeakMap<PartitionState, Host>();

function hostFor(st: PartitionState, out: ProcessResult): Host {
  let h = hosts.get(st);
  if (h === undefined) hosts.set(st, (h = host(st)));
  h.out = out;
  return h;
}

function host(st: PartitionState): Host {
  // A downstream partition's alerts are named apart from the event log's partition of its number.
  const scope = st.down === undefined ? `${st.partition}` : `${st.partition}~${st.down.space}`;
  const h: Host = {
    out: newResult(),
    limits: st.limits,
    windows: st.windows,
    schedule(time, rule, key) {
      st.timers.push({ time, n: st.timerN++, ruleId: rule.id, epoch: rule.stateEpoch, key });
    },
    alert(rule: CompiledRule, ks: KeyState, a: AlertDraft) {
      if (rule.suppressForMs > 0) {
        if (ks.sup !== undefined && a.ts < ks.sup + rule.suppressForMs) {
          h.out.suppressed++;
          return;
        }
        ks.sup = a.ts;
      }
      const vars = (name: string): unknown =>
        name === 'key'
          ? a.key
          : name === 'ruleId'
            ? rule.id
            : Object.hasOwn(a.fields, name)
              ? a.fields[name]
              : undefined;
      add(h.out, 'alerts', {
        // Partition and state epoch make the cause unique even for key- and window-based alerts.
        id: alertId(rule.id, rule.version, `${scope}|${rule.stateEpoch}|${a.idParts}`),
        ruleId: rule.id,
        ruleVersion: rule.version,
        severity: rule.severity,
        title: rule.title(vars),
        key: a.key,
        partition: st.partition,
        ts: a.ts,
        events: a.events,
        values: a.values,
      });
    },
    error(rule, e, message, cause) {
      add(h.out, 'errors', {
        seq: e.ref.seq,
        ruleId: rule.id,
        error: new RuleEvaluationError(rule.id, cause ?? new Error(message)),
        event: e.event,
      });
    },
    overflow(rule, key, dropped, limit) {
      add(h.out, 'overflows', { ruleId: rule.id, key, dropped, limit });
    },
  };
  return h;
}

function isIdle(rule: CompiledRule, ks: KeyState): boolean {
  if (ks.sup !== undefined) return false;
  switch (rule.pattern?.kind) {
    case 'threshold':
      return thresholdIdle(ks);
    case 'sequence':
      return sequenceIdle(ks);
    case 'absence':
      return absenceIdle(ks);
    default:
      return true;
  }
}

/** Judges an event under the rule set in force at its log position; stateful rules see it later, in event-time order. */
function onEvent(
  st: PartitionState,
  rec: Extract<PartitionRecord, { kind: 'event' }>,
  out: ProcessResult,
  h: Host,
): void {
  const parsed = parseEvent(rec.data, rec.publishTs, st.limits);
  if (!parsed.ok) {
    add(out, 'invalid', { seq: rec.seq, reason: parsed.reason, message: parsed.message });
    return;
  }
  const { event, type, ts, id, hostile } = parsed;
  if (ts <= st.watermark) {
    add(out, 'late', { seq: rec.seq, ts, watermark: st.watermark });
    return;
  }
  const rs = st.ruleSet;
  // Made when a rule without a pattern fires (rare); a buffered event gets its own when released.
  let ref: EventRef | undefined;
  const lc = new LazyContext(event, rs, hostile);
  let hits: Hits | undefined;
  // The key spaces the event goes to and its key in each, side by side (rarely more than one).
  let spaces: string[] | undefined;
  let spaceKeys: string[] | undefined;
  const rules = rs.rulesFor(type);
  // A hostile event is judged exhaustively, where a rule skipped on its guard could have thrown.
  const skipped = hostile ? undefined : rs.guardsFor(type).skipped(event);
  for (let i = 0; i < rules.length; i++) {
    if (skipped !== undefined && skipped[i] === 1) continue;
    const rule = rules[i] as CompiledRule;
    const key = keyOf(rule, event, rec.key);
    if (key === undefined) {
      // A rule whose key field the event lacks does not meet it: said, not silent.
      add(out, 'keyMissing', rule.id);
      continue;
    }
    let v: number;
    try {
      v = ruleVerdict(rule, type, lc);
    } catch (err) {
      add(out, 'errors', {
        seq: rec.seq,
        ruleId: rule.id,
        error: new RuleEvaluationError(rule.id, err),
        event,
      });
      continue;
    }
    const trigger = (v & TRIGGER) !== 0;
    if (trigger) add(out, 'matched', rule.id);
    if (st.rekey && rekeyed(rule, st.localSpace)) {
      const space = rule.keySpace as string;
      if (v !== 0 && (spaces === undefined || !spaces.includes(space))) {
        (spaces ??= []).push(space);
        (spaceKeys ??= []).push(key);
      }
      continue;
    }
    if (rule.pattern === undefined) {
      if (!trigger) continue;
      const suppressing = rule.suppressForMs > 0;
      const ks = suppressing ? loadState(st, rule, key) : newKeyState();
      h.alert(rule, ks, {
        key,
        ts,
        events: [
          (ref ??= Object.freeze(
            id === undefined ? { seq: rec.seq, ts } : { seq: rec.seq, id, ts },
          )),
        ],
        values: {},
        idParts: `e|${rec.seq}`,
        fields: event,
      });
      if (suppressing) saveState(st, rule, key, ks);
    } else if (v !== 0) {
      (hits ??= new Hits(rec.key)).add(rule, key, v);
    }
  }
  if (hits !== undefined) {
    hits.trim();
    const b: Buffered = {
      ts,
      seq: rec.seq,
      id,
      // Recomputing its hits at restore needs an exact copy of the event: the text it was
      // parsed from. An object payload keeps its hits.
      key: parsed.text !== undefined ? rec.key : undefined,
      event,
      text: parsed.text,
      hostile,
      ruleSet: rs,
      hits,
    };
    st.buffer.push(b);
    tag(st, b);
  }
  if (spaces !== undefined) {
    const text = parsed.text ?? JSON.stringify(event);
    for (let i = 0; i < spaces.length; i++)
      add(out, 'forwards', {
        space: spaces[i] as string,
        key: (spaceKeys as string[])[i] as string,
        srcSeq: rec.seq,
        controlSeq: rs.controlSeq,
        ts,
        publishTs: rec.publishTs,
        text,
      });
  }
  if (ts > st.maxEventTs) st.maxEventTs = ts;
  // Event time moves no further than the log's own clock: an event whose `ts` runs ahead of the
  // time it was stored (a producer's clock ahead, or a bad one inside the future limit) is judged
  // at its `ts`, but cannot push the watermark past events stored after it in time.
  advance(st, ts < rec.publishTs ? ts : rec.publishTs, h);
}

/** The source of a forwarded record or report, or undefined (and the record refused) when it names none. */
function sourceOf(
  st: PartitionState,
  rec: Extract<PartitionRecord, { kind: 'forward' | 'report' }>,
  out: ProcessResult,
): Downstream | undefined {
  const d = st.down;
  if (d !== undefined && d.isSource(rec.src)) return d;
  add(out, 'invalid', {
    seq: rec.seq,
    reason: InvalidReason.badForward,
    message:
      d === undefined
        ? `partition ${st.partition} is not downstream of a re-keying hop: only Vigil's sources forward records, to downstream partitions`
        : `source partition ${rec.src} is not one of the ${d.sources} sources of key space "${d.space}"`,
  });
  return undefined;
}

/**
 * Judges a forwarded event under the rule set it was judged under at its source, by the rules of
 * this partition's key space. Every hit waits for the watermark, pattern or not: alerts and
 * suppression then follow event time, not the order in which the sources' records arrived.
 * Missing keys and rule errors were counted at the source and are not counted again.
 */
function onForward(
  st: PartitionState,
  rec: Extract<PartitionRecord, { kind: 'forward' }>,
  out: ProcessResult,
  h: Host,
): void {
  const d = sourceOf(st, rec, out);
  if (d === undefined) return;
  const src = rec.src;
  // A source replaying after a restart forwards again what it forwarded before.
  if (rec.srcSeq > (d.taken[src] as number)) {
    d.taken[src] = rec.srcSeq;
    judgeForward(st, d, rec, out);
  }
  advanceTo(st, d.hear(src, rec.watermark), h);
}

function judgeForward(
  st: PartitionState,
  d: Downstream,
  rec: Extract<PartitionRecord, { kind: 'forward' }>,
  out: ProcessResult,
): void {
  const parsed = parseEvent(rec.data, rec.publishTs, st.limits);
  if (!parsed.ok) {
    add(out, 'invalid', { seq: rec.seq, reason: parsed.reason, message: parsed.message });
    return;
  }
  const { event, type, ts, id, hostile } = parsed;
  // The source judged it in time; only a forged record (or a source's bad watermark) is late here.
  if (ts <= st.watermark) {
    add(out, 'late', { seq: rec.seq, ts, watermark: st.watermark });
    return;
  }
  const rs = rec.ruleSet;
  const lc = new LazyContext(event, rs, hostile);
  let hits: Hits | undefined;
  const rules = rs.rulesFor(type);
  const skipped = hostile ? undefined : rs.guardsFor(type).skipped(event);
  for (let i = 0; i < rules.length; i++) {
    if (skipped !== undefined && skipped[i] === 1) continue;
    const rule = rules[i] as CompiledRule;
    if (rule.keySpace !== d.space || !rekeyed(rule, undefined)) continue;
    const key = keyOf(rule, event, rec.key);
    if (key === undefined) continue;
    let v = 0;
    try {
      v = ruleVerdict(rule, type, lc);
    } catch {
      continue;
    }
    if (v !== 0) (hits ??= new Hits(rec.key)).add(rule, key, v);
  }
  if (hits === undefined) return;
  hits.trim();
  const b: Buffered = {
    ts,
    seq: rec.srcSeq,
    pos: rec.seq,
    id,
    key: parsed.text !== undefined ? rec.key : undefined,
    event,
    text: parsed.text,
    hostile,
    ruleSet: rs,
    hits,
  };
  st.buffer.push(b);
  tag(st, b);
}

/** Takes a source's report: its watermark, and the change it applied with its horizon there. */
function onReport(
  st: PartitionState,
  rec: Extract<PartitionRecord, { kind: 'report' }>,
  out: ProcessResult,
  h: Host,
): void {
  const d = sourceOf(st, rec, out);
  if (d === undefined) return;
  d.report(rec.src, rec.ruleSet, rec.horizon);
  advanceTo(st, d.hear(rec.src, rec.watermark), h);
}

/** Downstream: the watermark is the minimum of the sources'. */
function advanceTo(st: PartitionState, watermark: number, h: Host): void {
  if (watermark > st.watermark) st.watermark = watermark;
  release(st, h);
}

/**
 * The latest event time a source partition has seen (judged events and ticks): every event it
 * judged so far is at or before it. Reported at epoch markers (see `downstream.ts`).
 */
export function sourceHorizon(st: PartitionState): number {
  return Math.max(st.maxTs, st.maxEventTs);
}

function onTick(
  st: PartitionState,
  rec: Extract<PartitionRecord, { kind: 'tick' }>,
  out: ProcessResult,
  h: Host,
): void {
  const at = rec.storedAt;
  if (at !== undefined && rec.ts > at + st.limits.maxEventFutureMs) {
    add(out, 'invalid', {
      seq: rec.seq,
      reason: InvalidReason.badTick,
      message: `tick time ${rec.ts} is more than ${st.limits.maxEventFutureMs} ms after the time it was stored (${at}); ticks are written by Vigil only, with the time they are sent`,
    });
    return;
  }
  advance(st, at === undefined || rec.ts < at ? rec.ts : at, h);
}

function advance(st: PartitionState, ts: number, h: Host): void {
  if (ts > st.maxTs) {
    st.maxTs = ts;
    st.watermark = Math.max(st.watermark, ts - st.outOfOrderMs - 1);
  }
  release(st, h);
}

/** Releases buffered events up to the watermark in (ts, seq) order, firing due timers first. */
function release(st: PartitionState, h: Host): void {
  for (let b = st.buffer.peek(); b !== undefined && b.ts <= st.watermark; b = st.buffer.peek()) {
    st.buffer.pop();
    // Timers strictly before the event fire first: an event exactly at a deadline is too late to cancel it.
    catchUp(st, b.ts - 1, h);
    st.down?.noteReleased(b.ruleSet, st.ruleSet);
    const ref: EventRef = Object.freeze(
      b.id === undefined ? { seq: b.seq, ts: b.ts } : { seq: b.seq, id: b.id, ts: b.ts },
    );
    // One operator event for all of this event's hits: operators read it and keep none of it
    // (they keep `ref` and `event`), and an event of a busy type meets dozens of rules.
    const e: Mutable<OperatorEvent> = {
      event: b.event,
      ref,
      key: '',
      models: b.ruleSet.models,
      hostile: b.hostile,
      trigger: false,
      expected: false,
    };
    const hits = b.hits;
    try {
      for (let i = 0; i < hits.length; i++) {
        const key = hits.keyAt(i);
        applyHit(st, e, hits.rules[i] as CompiledRule, key, hits.bitsAt(i), h);
        if (key !== hitKey) {
          hitKeyNo = st.states.keyNumber(key);
          hitKey = hitKeyNo < 0 ? undefined : key;
        }
      }
    } finally {
      // The cache is this event's only: another partition may hold the same key.
      hitKey = undefined;
      hitKeyNo = -1;
    }
    untag(st, b);
  }
  catchUp(st, st.watermark, h);
}

/**
 * Fires the timers and expires the keys due up to `upTo`. Downstream, the changes that take
 * force by then are applied at their point of event time, after the timers due there.
 */
function catchUp(st: PartitionState, upTo: number, h: Host): void {
  const d = st.down;
  if (d !== undefined)
    for (let c = d.ready[0]; c !== undefined && c.end <= upTo; c = d.ready[0]) {
      fireTimers(st, c.end, h);
      expireKeys(st, c.end);
      d.ready.shift();
      applyRuleSet(st, c.ruleSet, h.out);
    }
  fireTimers(st, upTo, h);
  expireKeys(st, upTo);
}

/**
 * The end (see {@link stateEnd}) of a key's state in lineage `sid` under every rule version that
 * may still write to it (a buffered event may be judged under an older one): the state ends when
 * the last of them is done with it. Undefined when no rule writes to the lineage.
 */
function lineageEnd(
  st: PartitionState,
  sid: string,
  sup: number | undefined,
  op: unknown,
  withTtl = true,
): number | undefined {
  const at = sid.lastIndexOf('@');
  const rules = lineageRules(st, sid.slice(0, at), Number(sid.slice(at + 1)));
  if (rules.length === 0) return undefined;
  let end = -Infinity;
  for (const rule of rules) end = Math.max(end, stateEnd(rule, sup, op, st.windows, withTtl));
  return end;
}

/**
 * The expiry bucket of a key as its states stand (the earliest end among them, rounded up), or
 * undefined when none ends by itself. A key is listed at or before it (unless a compatible change
 * lowered `suppressFor` since: then its states go at the later listing).
 */
export function keyExpiry(st: PartitionState, states: KeyStates): number | undefined {
  let first = Infinity;
  states.forEach((sid, sup, op) => {
    const end = lineageEnd(st, sid, sup, op);
    if (end !== undefined && end > -Infinity && end < first) first = end;
  });
  return first === Infinity ? undefined : expiryBucket(first);
}

/** Looks at the keys listed in expiry buckets up to `upTo`, removing the states that can change nothing any more. */
function expireKeys(st: PartitionState, upTo: number): void {
  for (let b = st.expiry.peek(); b !== undefined && b <= upTo; b = st.expiry.peek()) {
    for (const key of st.expiry.take()) expireKey(st, key, b);
    if (b === st.legacyExpiry) st.legacyExpiry = undefined;
  }
}

/**
 * Removes a key's states whose end (see {@link stateEnd}) is at or before `bucket`, and lists the
 * key again for the earliest end of those left. Every rule version that may still write to a
 * lineage counts (a buffered event may be judged under an older one): the state ends when the
 * last of them is done with it.
 */
function expireKey(st: PartitionState, key: string, bucket: number): void {
  const k = keyOfState(st, key);
  // Gone, or listed again in another bucket since (this entry is stale).
  if (k < 0 || st.states.exp(k) !== bucket) return;
  const states = st.states;
  states.setExp(k, undefined);
  let next = Infinity;
  const done: number[] = [];
  for (let s = states.first(k), e = s + states.stateCount(k); s < e; s++) {
    const sid = states.sid(s);
    const sup = states.sup(s);
    const op = states.op(s);
    const end = lineageEnd(st, sid, sup, op);
    if (end === undefined) continue;
    if (end <= bucket) {
      const opEnd = lineageEnd(st, sid, undefined, op) ?? -Infinity;
      done.push(s);
      st.expired[
        (lineageEnd(st, sid, sup, op, false) ?? end) > bucket
          ? ExpiryReason.ttl
          : opEnd >= end
            ? ExpiryReason.window
            : ExpiryReason.suppression
      ]++;
    } else if (end < next) next = end;
  }
  st.dirty.add(key);
  // Last first: removing a state moves the ones after it.
  for (let i = done.length - 1; i >= 0; i--) deleteSlot(st, k, done[i] as number);
  if (next !== Infinity && states.keyNumber(key) === k) {
    const b = expiryBucket(next);
    states.setExp(k, b);
    st.expiry.add(key, b);
  }
}

/** Counts a buffered event's rule set as in use, and its lineages when that is not the current rule set (see `hitCounts`). */
export function tag(st: PartitionState, b: Buffered): void {
  st.tags.set(b.ruleSet, (st.tags.get(b.ruleSet) ?? 0) + 1);
  if (b.ruleSet !== st.ruleSet && st.down === undefined) countHits(st, b);
}

/** Adds a buffered event's hits to `hitCounts`. */
function countHits(st: PartitionState, b: Buffered): void {
  const rules = b.hits.rules;
  for (let i = 0; i < rules.length; i++) {
    const sid = (rules[i] as CompiledRule).sid;
    st.hitCounts.set(sid, (st.hitCounts.get(sid) ?? 0) + 1);
  }
}

/** Releases a buffered event's hold on its rule set and lineages; drops lineages nothing uses any more. */
function untag(st: PartitionState, b: Buffered): void {
  const left = (st.tags.get(b.ruleSet) ?? 1) - 1;
  if (left > 0) st.tags.set(b.ruleSet, left);
  else st.tags.delete(b.ruleSet);
  if (b.ruleSet === st.ruleSet || st.down !== undefined) return;
  for (const rule of b.hits.rules) {
    const sid = rule.sid;
    const n = (st.hitCounts.get(sid) ?? 1) - 1;
    if (n > 0) st.hitCounts.set(sid, n);
    else {
      st.hitCounts.delete(sid);
      if (!st.ruleSet.stateIds.has(sid)) dropLineage(st, sid);
    }
  }
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

function applyHit(
  st: PartitionState,
  e: Mutable<OperatorEvent>,
  rule: CompiledRule,
  key: string,
  bits: number,
  h: OperatorHost,
): void {
  const ks = loadState(st, rule, key);
  const trigger = (bits & TRIGGER) !== 0;
  e.key = key;
  e.trigger = trigger;
  e.expected = (bits & EXPECTED) !== 0;
  const p = rule.pattern;
  if (p?.kind === 'threshold') {
    if (trigger) thresholdEvent(rule, p, ks, e, h);
  } else if (p?.kind === 'sequence') {
    if (trigger) sequenceEvent(rule, p, ks, e, h);
  } else if (p?.kind === 'absence') absenceEvent(rule, p, ks, e, h);
  else if (p === undefined && trigger)
    // Downstream only: a rule with no pattern keyed to this key space alerts in event-time order.
    h.alert(rule, ks, {
      key,
      ts: e.ref.ts,
      events: [e.ref],
      values: {},
      idParts: `e|${e.ref.seq}`,
      fields: e.event,
    });
  saveState(st, rule, key, ks);
}

/**
 * The other rule sets whose versions may run a lineage: those of buffered events; downstream,
 * where events bring newer rule sets than the one in force and in any order, the newer ones that
 * released events were judged under (which depends on event time only).
 */
function ruleSetsInPlay(st: PartitionState): Iterable<RuleSet> {
  return st.down === undefined ? st.tags.keys() : st.down.released.values();
}

/** Every rule version that may write to a lineage: the current rule set's, and those of other rule sets in play. */
function lineageRules(st: PartitionState, ruleId: string, epoch: number): CompiledRule[] {
  const out: CompiledRule[] = [];
  const cur = st.ruleSet.rules.get(ruleId);
  if (cur?.stateEpoch === epoch) out.push(cur);
  for (const rs of ruleSetsInPlay(st)) {
    const r = rs.rules.get(ruleId);
    if (r?.stateEpoch === epoch && !out.includes(r)) out.push(r);
  }
  return out;
}

/** The newest rule version that writes to a lineage: the current rule set first (downstream: last), then the others in play. */
function lineageRule(st: PartitionState, ruleId: string, epoch: number): CompiledRule | undefined {
  const cur = st.ruleSet.rules.get(ruleId);
  // Downstream the rule sets in play are newer than the one in force.
  if (cur?.stateEpoch === epoch && st.down === undefined) return cur;
  // The newest other rule set wins; choosing by control sequence keeps this independent of map order.
  let best: CompiledRule | undefined = cur?.stateEpoch === epoch ? cur : undefined;
  let bestSeq = -1;
  for (const rs of ruleSetsInPlay(st)) {
    const r = rs.rules.get(ruleId);
    if (r?.stateEpoch === epoch && rs.controlSeq > bestSeq) {
      best = r;
      bestSeq = rs.controlSeq;
    }
  }
  return best;
}

function fireTimers(st: PartitionState, upTo: number, h: OperatorHost): void {
  for (let t = st.timers.peek(); t !== undefined && t.time <= upTo; t = st.timers.peek()) {
    st.timers.pop();
    const rule = lineageRule(st, t.ruleId, t.epoch);
    // A deleted or reset lineage has no state left; a paused rule's due state is dropped without alerts.
    if (rule === undefined) continue;
    const k = keyOfState(st, t.key);
    const slot = k < 0 ? -1 : st.states.find(k, rule.lin);
    if (slot < 0) continue;
    st.dirty.add(t.key);
    const ks = fillView(st, k, slot);
    const p = rule.pattern;
    const emit = !rule.paused;
    if (p?.kind === 'threshold') thresholdTimer(rule, p, ks, t.key, t.time, h, emit);
    else if (p?.kind === 'sequence') sequenceTimer(rule, p, ks, t.key, t.time, h);
    else if (p?.kind === 'absence') absenceTimer(rule, p, ks, t.key, t.time, h, emit);
    saveState(st, rule, t.key, ks);
  }
}

/**
 * Drops keyed state (and lineage numbers) of lineages that no rule set in use refers to any more
 * (deleted or reset rules). Lineages with state are always the previous rule set's or ones buffered hits wait for,
 * so those cover the restored keys not decoded yet too.
 */
function collectLineages(st: PartitionState, previous: RuleSet): void {
  // Numbered lineages too: one whose keys all emptied holds no state but keeps its number.
  const held = new Set([...st.lineageKeys.keys(), ...st.lineageIndex.lineages()]);
  if (st.raw.size > 0) for (const sid of previous.stateIds) held.add(sid);
  for (const sid of held)
    if (!st.ruleSet.stateIds.has(sid) && !st.hitCounts.has(sid) && !releasedHold(st, sid))
      dropLineage(st, sid);
}

/** Downstream: whether a lineage belongs to a newer rule set than the one in force that released events were judged under. */
function releasedHold(st: PartitionState, sid: string): boolean {
  const d = st.down;
  if (d === undefined) return false;
  for (const rs of d.released.values()) if (rs.stateIds.has(sid)) return true;
  return false;
}

function onMarker(
  st: PartitionState,
  rec: Extract<PartitionRecord, { kind: 'marker' }>,
  out: ProcessResult,
): void {
  applyRuleSet(st, rec.ruleSet, out);
}

/** Puts a rule set in force, dropping the lineages nothing uses any more. */
function applyRuleSet(st: PartitionState, ruleSet: RuleSet, out: ProcessResult): void {
  // A marker for a control sequence already in force (a duplicate, or one written twice during a handoff) changes nothing.
  if (ruleSet.controlSeq <= st.ruleSet.controlSeq) return;
  const previous = st.ruleSet;
  st.ruleSet = ruleSet;
  out.applied = ruleSet.controlSeq;
  // Downstream, lineages live by the rule sets in force and released (see `lineageRules`), not by buffered events.
  if (st.down !== undefined) st.down.forgetUpTo(ruleSet.controlSeq);
  // The events judged under the rule set that was current now hold their lineages by count.
  else if (st.tags.has(previous))
    for (const b of st.buffer.unordered()) if (b.ruleSet === previous) countHits(st, b);
  collectLineages(st, previous);
}

/**
 * The runtime's one entry point: processes one record of the partition's log and returns what it
 * produced. Deterministic: the same state and record always give the same result and the same
 * next state; no I/O, no clock. Records must come in log order (increasing `seq`).
 */
export function processRecord(st: PartitionState, rec: PartitionRecord): ProcessResult {
  const out = newResult();
  // A record at or before the offset was processed already (a redelivery after a restore): skip it.
  if (rec.seq <= st.offset) return out;
  const h = hostFor(st, out);
  if (st.down !== undefined && rec.kind !== 'forward' && rec.kind !== 'report') {
    add(out, 'invalid', {
      seq: rec.seq,
      reason: InvalidReason.badForward,
      message: `a downstream partition of key space "${st.down.space}" takes forwarded records and source reports only, not a ${rec.kind}`,
    });
    st.offset = rec.seq;
    return out;
  }
  switch (rec.kind) {
    case 'event':
      onEvent(st, rec, out, h);
      break;
    case 'marker':
      onMarker(st, rec, out);
      break;
    case 'tick':
      onTick(st, rec, out, h);
      break;
    case 'forward':
      onForward(st, rec, out, h);
      break;
    case 'report':
      onReport(st, rec, out, h);
      break;
  }
  st.offset = rec.seq;
  return out;
}
