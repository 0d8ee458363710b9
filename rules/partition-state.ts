/**
 * What a partition is: its records (events, epoch markers, ticks; downstream of a re-keying hop,
 * forwarded events and source reports), its state, what processing one record produces, and the
 * making of a new one. The engine that changes it is spread by concern: `partition.ts` (the
 * entry point and the event log's records), `downstream-records.ts`, `release.ts`,
 * `keyed-access.ts`, `key-expiry.ts` and `lineage-use.ts`.
 */
import { Heap } from './cep/heap.js';
import { WindowArena } from './cep/small-window.js';
import { RuleEvaluationError } from './errors.js';
import { parseEvent, type InvalidReason, type ParseEventResult } from './event.js';
import { LineageIndex } from './lineage-index.js';
import { KeyedStates } from './keyed-states.js';
import { DEFAULT_LIMITS, type RuleLimits } from './limits.js';
import { Downstream } from './downstream.js';
import { SourceHop, type HopMessage, type RekeyOptions } from './source-hop.js';
import { ExpiryQueue, ExpiryReason } from './expiry.js';
import type { RuleSet } from './rule-set.js';
import type { Alert } from './types.js';
import { Hits } from './verdict.js';

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
   * forwarded as its `n`-th message here (of its numbering from `origin`, see `source-hop.ts`),
   * judged there under `ruleSet`, with the source's watermark after it.
   */
  | {
      readonly kind: 'forward';
      readonly seq: number;
      readonly src: number;
      readonly origin: number;
      readonly n: number;
      readonly srcSeq: number;
      readonly ruleSet: RuleSet;
      readonly watermark: number;
      readonly key: string;
      readonly data: unknown;
      readonly publishTs: number;
    }
  /**
   * Downstream: source partition `src`'s watermark, the rule set in force there and its horizon
   * (see `sourceHorizon`). A source reports at each epoch marker it applies, so the first
   * report of a rule set carries the horizon at its marker; it may report more often.
   */
  | {
      readonly kind: 'report';
      readonly seq: number;
      readonly src: number;
      readonly origin: number;
      readonly n: number;
      readonly ruleSet: RuleSet;
      readonly watermark: number;
      readonly horizon: number;
    };

export interface PartitionOptions {
  readonly partition: number;
  /** Bounded out-of-orderness: events may arrive up to this much behind the newest one. Default 0. */
  readonly outOfOrderMs?: number;
  readonly limits?: RuleLimits;
  /** Given, the partition sends the events of re-keyed rules on instead of judging them (see `source-hop.ts`). */
  readonly rekey?: RekeyOptions;
}

/** What a restore takes of a partition's options: the partition comes from the checkpoint. */
export type RestoreOptions = Omit<PartitionOptions, 'partition'>;

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
  /**
   * With `rekey`: what the record sends downstream, in order: the event, once per key space of
   * its re-keyed rules; reports at an epoch marker and as event time passes.
   */
  readonly sent: HopMessage[];
  /** Alerts held back by `alert.suppressFor`. */
  suppressed: number;
  /** The control sequence a marker brought into force. */
  applied: number | undefined;
  /** Downstream: a message from a source not taken, as one taken already or one before its turn. */
  skipped: 'duplicate' | 'gap' | undefined;
}

export interface Buffered {
  readonly ts: number;
  /** The event's position in its partition's log (downstream: in its source's), which orders events of one time and names them in alerts. */
  readonly seq: number;
  /** The position of the record in the partition's own log (downstream: the forwarded record's; else `seq`), which checkpoints go by. */
  readonly pos: number;
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
 * and the watermark. Changed in place by `processRecord`; serialised by `snapshotPartition`.
 */
export interface PartitionState {
  readonly partition: number;
  readonly outOfOrderMs: number;
  readonly limits: RuleLimits;
  /** With `rekey`: what the partition sends on, and where (see `source-hop.ts`). */
  readonly hop: SourceHop | undefined;
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
   * drops such a state frees the handle (see `freeOp` in keyed-access.ts).
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
  let hop: SourceHop | undefined;
  if (options.rekey !== undefined) {
    hop = new SourceHop(options.rekey);
    hop.addSpaces(ruleSet);
  }
  return newState(ruleSet, options.partition, outOfOrderMs, options.limits, hop, undefined);
}

/**
 * A new downstream partition of a re-keying hop (see `downstream.ts`). Its rule set in force
 * starts empty and follows the changes its sources report; its events bring their own.
 */
export function createDownstream(
  ruleSet: RuleSet,
  options: DownstreamOptions,
  /** A restore's: what it knew of its sources. */
  down = new Downstream(options.space, options.sources),
): PartitionState {
  return newState(ruleSet, options.partition, 0, options.limits, undefined, down);
}

function newState(
  ruleSet: RuleSet,
  partition: number,
  outOfOrderMs: number,
  limits: RuleLimits | undefined,
  hop: SourceHop | undefined,
  down: Downstream | undefined,
): PartitionState {
  return {
    partition,
    outOfOrderMs,
    limits: limits ?? DEFAULT_LIMITS,
    hop,
    down,
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
  'alerts' | 'late' | 'invalid' | 'errors' | 'overflows' | 'matched' | 'keyMissing' | 'sent';
type MutableResult = { -readonly [K in keyof ProcessResult]: ProcessResult[K] };

export function newResult(): ProcessResult {
  return {
    alerts: NONE,
    late: NONE,
    invalid: NONE,
    errors: NONE,
    overflows: NONE,
    matched: NONE,
    keyMissing: NONE,
    sent: NONE,
    suppressed: 0,
    applied: undefined,
    skipped: undefined,
  };
}

/** Appends to one of a result's lists, giving it an array of its own first. */
export function add<K extends Lists>(
  out: ProcessResult,
  list: K,
  x: ProcessResult[K][number],
): void {
  const a = out[list] as unknown[];
  if (a === NONE) (out as MutableResult)[list] = [x] as MutableResult[K];
  else a.push(x);
}

/**
 * Parses a record's event and checks its time against the watermark: the event, or undefined when
 * it is invalid or late (reported in `out`, judged by no rule).
 */
export function parseInTime(
  st: PartitionState,
  seq: number,
  data: unknown,
  publishTs: number,
  out: ProcessResult,
): Extract<ParseEventResult, { ok: true }> | undefined {
  const parsed = parseEvent(data, publishTs, st.limits);
  if (!parsed.ok) {
    add(out, 'invalid', { seq, reason: parsed.reason, message: parsed.message });
    return undefined;
  }
  if (parsed.ts <= st.watermark) {
    add(out, 'late', { seq, ts: parsed.ts, watermark: st.watermark });
    return undefined;
  }
  return parsed;
}
