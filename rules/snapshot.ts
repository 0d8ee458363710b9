import { hasHostileObject } from './compile-condition.js';
import { decodeKeyStates, keyStatesJSON, type LineageStateJSON } from './key-state-json.js';
import { SnapshotError } from './errors.js';
import { decodeAllKeys, putKeyStates } from './keyed-access.js';
import { dropStateSentOn, tag } from './lineage-use.js';
import {
  createDownstream,
  createPartition,
  type Buffered,
  type RestoreOptions,
  type PartitionState,
} from './partition-state.js';
import type { RuleSet, RuleSetAt } from './rule-set.js';
import type { CompiledRule } from './compile-rule.js';
import { buffersHits, Downstream, type DownstreamJSON } from './downstream.js';
import type { SourceHopJSON } from './source-hop.js';
import { bufferedHits, EXPECTED, Hits, TRIGGER } from './verdict.js';

// v5 (checkpoint metas): keyed-state fields name lineages by number, and the store keeps the
// numbers beside the meta (see LineageIndex); v4 fields (lineage ids) are still read.
// v4 (checkpoint metas): buffered events are in chunks of their own, each written once, and the
// meta lists the rule sets they were judged under. Snapshots keep the v3 layout.
// v3: buffered events as their JSON text with their record key (hits are recomputed at restore);
// checkpoint fields with window timestamps from a base and empty parts left out.
// v2: keyed state grouped by key (one checkpoint field per key), no longer by lineage.
// v6: a key's field ends with its expiry bucket, when it has one (see `fieldExpiry`).
// v7: keyed-state fields are written as symbols, not JSON text (see `checkpoint-field.ts`); the
// text fields of v2 to v6 are still read.
export const CHECKPOINT_FORMAT = 'vigil.partition.v7';
/** v6 metas: as v7, but every field is JSON text. */
export const FORMAT_V6 = 'vigil.partition.v6';
/** v5 metas: as v6, but fields record no expiry bucket (their keys are looked at once after restore). */
export const FORMAT_V5 = 'vigil.partition.v5';
/** v4 metas: buffered events in chunks, as v5, and fields that name lineages by their ids. */
export const FORMAT_V4 = 'vigil.partition.v4';
const FORMAT = 'vigil.partition.v3';
/** v2 metas and fields are restored as they are (see {@link restoreKey}, {@link restoreMeta}). */
const FORMAT_V2 = 'vigil.partition.v2';
/** State by lineage, one field per rule and key: still restored, see {@link restoreV1Fields}. */
export const FORMAT_V1 = 'vigil.partition.v1';

type HitJSON = [ruleId: string, key: string, trigger: 0 | 1, expected: 0 | 1];
/** v3: the record key (hits are recomputed); v2, or v3 for an event restored from v2: the hits. */
export type BufferedJSON = [
  ts: number,
  seq: number,
  id: string | null,
  event: unknown,
  controlSeq: number,
  keyOrHits: string | HitJSON[],
  /** Downstream of a re-keying hop: the forwarded record's position in the partition's log. */
  pos?: number,
];
type TimerJSON = [time: number, n: number, ruleId: string, epoch: number, key: string];

/** Everything of a partition but its keyed state (and, from v4 on, its buffered events). */
export interface MetaJSON {
  format:
    | typeof CHECKPOINT_FORMAT
    | typeof FORMAT_V6
    | typeof FORMAT_V5
    | typeof FORMAT_V4
    | typeof FORMAT
    | typeof FORMAT_V2
    | typeof FORMAT_V1;
  partition: number;
  offset: number;
  maxTs: number | null;
  watermark: number | null;
  controlSeq: number;
  /** Up to v3 (and in snapshots): the buffered events. */
  buffer?: BufferedJSON[];
  /** v4: the control sequences of the rule sets buffered events were judged under. */
  ruleSets?: number[];
  timers: TimerJSON[];
  timerN: number;
  /**
   * v6: the expiry bucket of fields restored from a v5 or older checkpoint and not rewritten
   * since (they record none of their own), while it has not come.
   */
  legacyExpiry?: number;
  /** The latest event time judged, when it runs ahead of `maxTs` (see `sourceHorizon`). */
  maxEventTs?: number;
  /** A downstream partition of a re-keying hop: its sources and changes. */
  down?: DownstreamJSON;
  /** A source partition of a re-keying hop: what it sent where (see `source-hop.ts`). */
  hop?: SourceHopJSON;
}

interface PartitionJSON extends MetaJSON {
  /** A key's expiry bucket third, when it has one. */
  states: [key: string, lineages: LineageStateJSON[], exp?: number][];
}

const num = (x: number): number | null => (Number.isFinite(x) ? x : null);

/**
 * One buffered event as JSON text: `[ts, seq, id, event, controlSeq, key]`. The event is written
 * as the text it was parsed from, without its hits (restore recomputes them): stringifying events
 * with their hits was most of a checkpoint's cost. A snapshot is canonical (equal states, equal
 * bytes), so it writes the hits and the parsed event instead.
 */
export function bufferedText(b: Buffered, canonical: boolean): string {
  // Restored from v2, an event's record key is not known: its hits are written.
  const keyOrHits: BufferedJSON[5] =
    (canonical ? undefined : b.key) ??
    b.hits.toArray().map((x): HitJSON => [x.rule.id, x.key, x.trigger ? 1 : 0, x.expected ? 1 : 0]);
  return (
    '[' +
    b.ts +
    ',' +
    b.seq +
    ',' +
    JSON.stringify(b.id ?? null) +
    ',' +
    // A restored event has no text.
    ((canonical || b.key === undefined ? undefined : b.text) ?? JSON.stringify(b.event)) +
    ',' +
    b.ruleSet.controlSeq +
    ',' +
    JSON.stringify(keyOrHits) +
    (b.pos === b.seq ? ']' : ',' + b.pos + ']')
  );
}

/**
 * Everything of a partition but its keyed state, as JSON text (written whole at every
 * checkpoint). A checkpoint's meta (v4) leaves the buffered events out, and lists the rule sets
 * they need; a snapshot's (v3) holds them.
 */
export function metaText(st: PartitionState, snapshot: boolean): string {
  const head = JSON.stringify({
    format: snapshot ? FORMAT : CHECKPOINT_FORMAT,
    partition: st.partition,
    offset: st.offset,
    maxTs: num(st.maxTs),
    watermark: num(st.watermark),
    controlSeq: st.ruleSet.controlSeq,
    timers: st.timers.sorted().map((t): TimerJSON => [t.time, t.n, t.ruleId, t.epoch, t.key]),
    timerN: st.timerN,
    ...(st.legacyExpiry === undefined || snapshot ? {} : { legacyExpiry: st.legacyExpiry }),
    ...(st.maxEventTs > st.maxTs ? { maxEventTs: st.maxEventTs } : {}),
    ...(st.down === undefined ? {} : { down: st.down.toJSON() }),
    ...(st.hop === undefined ? {} : { hop: st.hop.toJSON() }),
  });
  if (!snapshot) {
    const seqs = [...st.tags.keys()].map((rs) => rs.controlSeq).sort((x, y) => x - y);
    return head.slice(0, -1) + ',"ruleSets":' + JSON.stringify(seqs) + '}';
  }
  let buffer = '[';
  for (const b of st.buffer.sorted())
    buffer += (buffer.length > 1 ? ',' : '') + bufferedText(b, true);
  return head.slice(0, -1) + ',"buffer":' + buffer + ']}';
}

/** Puts one key's states into a partition being restored (see {@link decodeKeyStates}). */
export function restoreKey(
  st: PartitionState,
  key: string,
  field: readonly (LineageStateJSON | number)[],
): void {
  putKeyStates(st, key, decodeKeyStates(key, field, st.windows));
}

const byFirst = <T extends readonly [string, ...unknown[]]>(a: T, b: T): number =>
  a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;

/**
 * Serialises a partition's state (offset, watermark, reorder buffer, keyed state, timers and the
 * control sequence in force) to bytes. Rule sets are not included: they are stored once per
 * control sequence, and {@link restorePartition} asks for them by sequence.
 */
export function snapshotPartition(st: PartitionState): Uint8Array {
  decodeAllKeys(st);
  // Canonical (sorted) order: equal states give equal bytes, whatever order keys were touched in.
  const states = [...st.states.keys()]
    .map((key): [string, LineageStateJSON[], number?] => {
      const k = st.states.keyNumber(key);
      const json = keyStatesJSON(st.states.statesOf(k), st.windows).sort(byFirst);
      const exp = st.states.exp(k);
      // The bucket the key is listed in, as a checkpoint field records it: a restored partition
      // looks at its keys when an uninterrupted one would.
      return exp === undefined ? [key, json] : [key, json, exp];
    })
    .sort(byFirst);
  return new TextEncoder().encode(
    metaText(st, true).slice(0, -1) + ',"states":' + JSON.stringify(states) + '}',
  );
}

/**
 * A partition from its meta and, from v4 on, the buffered events read from its chunks (see
 * `restorePartitionParts`).
 */
export function restoreMeta(
  json: MetaJSON,
  buffered: Iterable<BufferedJSON>,
  ruleSetAt: RuleSetAt,
  options: RestoreOptions,
): PartitionState {
  if (
    json?.format !== CHECKPOINT_FORMAT &&
    json?.format !== FORMAT_V6 &&
    json?.format !== FORMAT_V5 &&
    json?.format !== FORMAT_V4 &&
    json?.format !== FORMAT &&
    json?.format !== FORMAT_V2 &&
    json?.format !== FORMAT_V1
  )
    throw new SnapshotError(
      `unknown partition snapshot format ${JSON.stringify(json?.format)}; expected ${CHECKPOINT_FORMAT} or an earlier one`,
    );
  const sets = new Map<number, RuleSet>();
  const at = (seq: number): RuleSet => {
    let rs = sets.get(seq);
    if (rs === undefined) {
      rs = ruleSetAt(seq);
      if (rs === undefined || rs.controlSeq !== seq)
        throw new SnapshotError(
          `the snapshot needs the rule set at control sequence ${seq}, which was not provided`,
        );
      sets.set(seq, rs);
    }
    return rs;
  };
  const st =
    json.down === undefined
      ? createPartition(at(json.controlSeq), { ...options, partition: json.partition })
      : createDownstream(
          at(json.controlSeq),
          {
            partition: json.partition,
            space: json.down.space,
            sources: json.down.sources,
            limits: options.limits,
          },
          Downstream.fromJSON(json.down, at),
        );
  st.offset = json.offset;
  st.maxTs = json.maxTs ?? -Infinity;
  st.maxEventTs = json.maxEventTs ?? st.maxTs;
  // A checkpoint written without the hop (it was off): the numbering begins here, anew.
  if (json.hop !== undefined) st.hop?.restore(json.hop);
  else if (st.hop !== undefined) st.hop.origin = json.offset;
  const judges = (rule: CompiledRule): boolean =>
    buffersHits(
      rule,
      st.down?.space,
      st.hop === undefined ? undefined : (r) => st.hop?.sendsOn(r) === true,
    );
  st.watermark = json.watermark ?? -Infinity;
  st.timerN = json.timerN;
  const restore = ([ts, seq, id, e, cs, keyOrHits, pos]: BufferedJSON): void => {
    const rs = at(cs);
    const event = e as Record<string, unknown>;
    const hostile = hasHostileObject(event);
    const key = typeof keyOrHits === 'string' ? keyOrHits : undefined;
    let hits: Hits;
    if (typeof keyOrHits === 'string') hits = bufferedHits(rs, event, keyOrHits, hostile, judges);
    else {
      hits = new Hits(keyOrHits[0]?.[1] ?? '');
      for (const [ruleId, hitKey, trigger, expected] of keyOrHits) {
        const rule = rs.rules.get(ruleId);
        if (rule === undefined)
          throw new SnapshotError(
            `buffered event ${seq} names rule "${ruleId}", which the rule set at ${cs} does not hold`,
          );
        // Judged before the hop sent this rule's events on (see `afterHopSwitch`).
        if (!judges(rule)) continue;
        hits.add(rule, hitKey, (trigger === 1 ? TRIGGER : 0) | (expected === 1 ? EXPECTED : 0));
      }
      hits.trim();
    }
    const b: Buffered = {
      ts,
      seq,
      pos: pos ?? seq,
      id: id ?? undefined,
      key,
      event,
      text: undefined,
      hostile,
      ruleSet: rs,
      hits,
    };
    st.buffer.push(b);
    tag(st, b);
  };
  // A meta before v4 holds the buffered events (the next checkpoint writes them as a chunk).
  for (const entry of json.buffer ?? []) restore(entry);
  for (const entry of buffered) restore(entry);
  for (const [time, n, ruleId, epoch, key] of json.timers)
    st.timers.push({ time, n, ruleId, epoch, key });
  return st;
}

/**
 * Restores a partition from {@link snapshotPartition}'s bytes. `ruleSetAt` returns the rule set
 * in force after a given control sequence (the current one, and older ones that buffered events
 * were judged under). The restored partition behaves exactly like the original.
 * @throws SnapshotError when the bytes are not a snapshot or a rule set is missing.
 */
export function restorePartition(
  bytes: Uint8Array,
  ruleSetAt: RuleSetAt,
  options: RestoreOptions,
): PartitionState {
  let json: PartitionJSON;
  try {
    json = JSON.parse(new TextDecoder().decode(bytes)) as PartitionJSON;
  } catch (e) {
    throw new SnapshotError('partition snapshot is not JSON', e);
  }
  const st = restoreMeta(json, [], ruleSetAt, options);
  if (json.format === FORMAT_V1) {
    // v1: [lineage, [key, sup, state][]][]
    const byKey = new Map<string, LineageStateJSON[]>();
    for (const [sid, keys] of json.states as unknown as [
      string,
      [string, number | null, unknown][],
    ][])
      for (const [key, sup, op] of keys) {
        const list = byKey.get(key) ?? [];
        list.push([sid, sup, op]);
        byKey.set(key, list);
      }
    for (const [key, lineages] of byKey) restoreKey(st, key, lineages);
    return afterHopSwitch(json, st);
  }
  for (const [key, lineages, exp] of json.states) {
    restoreKey(st, key, lineages);
    const k = st.states.keyNumber(key);
    if (exp !== undefined && k >= 0) {
      st.states.setExp(k, exp);
      st.expiry.add(key, exp);
    }
  }
  return afterHopSwitch(json, st);
}

/**
 * A source restored with other hop settings than its checkpoint was written with (the hop turned
 * on, or another partition key): the state it holds of rules it now sends on is of their old
 * path. It is dropped, so none of it fires (an absence timer whose confirming event now goes
 * through the hop), and those rules start again in their key spaces' partitions.
 */
export function afterHopSwitch(json: MetaJSON, st: PartitionState): PartitionState {
  const hop = st.hop;
  if (hop === undefined) return st;
  // `false`: written with the hop off (no key space is `false`, not even one named "off").
  const was = json.hop === undefined ? false : json.hop.local;
  // A checkpoint that does not say which key was local (written before it did) is taken as written alike.
  if (was !== undefined && was !== (hop.localSpace ?? null)) dropStateSentOn(st, hop);
  return st;
}
