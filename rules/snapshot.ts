import { hasHostileObject } from './compile-condition.js';
import { ByteWriter } from './byte-writer.js';
import { CheckpointFields } from './checkpoint-fields.js';
import {
  decodeKeyStates,
  keyStatesJSON,
  writeKeyStates,
  type LineageStateJSON,
} from './key-state-json.js';
import { SnapshotError } from './errors.js';
import {
  createPartition,
  decodeAllKeys,
  putKeyStates,
  tag,
  type Buffered,
  type Hit,
  type PartitionOptions,
  type PartitionState,
} from './partition.js';
import type { RuleSet } from './rule-set.js';
import { bufferedHits } from './verdict.js';

// v3: buffered events as their JSON text with their record key (hits are recomputed at restore);
// checkpoint fields with window timestamps from a base and empty parts left out.
// v2: keyed state grouped by key (one checkpoint field per key), no longer by lineage.
const FORMAT = 'vigil.partition.v3';
/** v2 metas and fields are restored as they are (see {@link restoreKey}, {@link restoreMeta}). */
const FORMAT_V2 = 'vigil.partition.v2';
/** State by lineage, one field per rule and key: still restored, see {@link restoreV1Fields}. */
const FORMAT_V1 = 'vigil.partition.v1';

type HitJSON = [ruleId: string, key: string, trigger: 0 | 1, expected: 0 | 1];
/** v3: the record key (hits are recomputed); v2, or v3 for an event restored from v2: the hits. */
type BufferedJSON = [
  ts: number,
  seq: number,
  id: string | null,
  event: unknown,
  controlSeq: number,
  keyOrHits: string | HitJSON[],
];
type TimerJSON = [time: number, n: number, ruleId: string, epoch: number, key: string];

/** Everything of a partition but its keyed state. */
interface MetaJSON {
  format: typeof FORMAT | typeof FORMAT_V2 | typeof FORMAT_V1;
  partition: number;
  offset: number;
  maxTs: number | null;
  watermark: number | null;
  controlSeq: number;
  buffer: BufferedJSON[];
  timers: TimerJSON[];
  timerN: number;
}

interface PartitionJSON extends MetaJSON {
  states: [key: string, lineages: LineageStateJSON[]][];
}

const num = (x: number): number | null => (Number.isFinite(x) ? x : null);

/**
 * Everything of a partition but its keyed state, as JSON text (written whole at every checkpoint).
 * A buffered event is written as the text it was parsed from, without its hits: a partition
 * buffers a second or so of events, and stringifying them with their hits was most of a
 * checkpoint's cost.
 */
function metaText(st: PartitionState, canonical: boolean): string {
  const head = JSON.stringify({
    format: FORMAT,
    partition: st.partition,
    offset: st.offset,
    maxTs: num(st.maxTs),
    watermark: num(st.watermark),
    controlSeq: st.ruleSet.controlSeq,
    timers: st.timers.sorted().map((t): TimerJSON => [t.time, t.n, t.ruleId, t.epoch, t.key]),
    timerN: st.timerN,
  });
  let buffer = '[';
  for (const b of st.buffer.sorted()) {
    // A snapshot writes the hits (restored from v2, an event's record key is not known).
    const keyOrHits: BufferedJSON[5] =
      (canonical ? undefined : b.key) ??
      b.hits.map((x): HitJSON => [x.rule.id, x.key, x.trigger ? 1 : 0, x.expected ? 1 : 0]);
    buffer +=
      (buffer.length > 1 ? ',[' : '[') +
      b.ts +
      ',' +
      b.seq +
      ',' +
      JSON.stringify(b.id ?? null) +
      ',' +
      // A snapshot is canonical (equal states, equal bytes); a restored event has no text.
      ((canonical || b.key === undefined ? undefined : b.text) ?? JSON.stringify(b.event)) +
      ',' +
      b.ruleSet.controlSeq +
      ',' +
      JSON.stringify(keyOrHits) +
      ']';
  }
  return head.slice(0, -1) + ',"buffer":' + buffer + ']}';
}

/** Puts one key's states into a partition being restored (see {@link decodeKeyStates}). */
function restoreKey(
  st: PartitionState,
  key: string,
  field: readonly (LineageStateJSON | number)[],
): void {
  putKeyStates(st, key, decodeKeyStates(key, field));
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
  const states = [...st.states]
    .map(([key, byLineage]): [string, LineageStateJSON[]] => [
      key,
      keyStatesJSON(byLineage).sort(byFirst),
    ])
    .sort(byFirst);
  return new TextEncoder().encode(
    metaText(st, true).slice(0, -1) + ',"states":' + JSON.stringify(states) + '}',
  );
}

/**
 * A checkpoint of a partition in parts: `meta` (everything but keyed state, written whole each
 * time) and keyed state as hash fields, one per key (the field is the key; the value holds every
 * lineage's state of that key). Incremental by default: only the keys changed since the last
 * call (`upserts`), and those that no longer hold state (`deletes`); `full` lists every key, for
 * a store that rewrites its copy. Taking a checkpoint resets the change tracking; a store that
 * fails to write one hands it back with {@link requeueCheckpoint}.
 */
export interface CheckpointParts {
  readonly offset: number;
  readonly controlSeq: number;
  readonly meta: string;
  readonly upserts: CheckpointFields;
  readonly deletes: readonly string[];
  readonly full: boolean;
  /** The keys marked changed when the checkpoint was taken. */
  readonly changed: readonly string[];
}

/**
 * The size of what a checkpoint writes: its meta and field names in UTF-16 units, its values in
 * bytes (the same for ASCII text, which nearly all of it is).
 */
export function checkpointPartsBytes(parts: CheckpointParts): number {
  let n = parts.meta.length + parts.upserts.valueBytes;
  for (const f of parts.upserts.keys) n += f.length;
  return n;
}

/** Room for a changed key's value to begin with; the writer doubles when it needs more. */
const BYTES_PER_KEY_GUESS = 1024;

export function checkpointParts(st: PartitionState, full = false): CheckpointParts {
  const keys: string[] = [];
  const ends: number[] = [];
  const deletes: string[] = [];
  const changed = [...st.dirty];
  st.dirty.clear();
  const w = new ByteWriter(
    BYTES_PER_KEY_GUESS * (full ? st.states.size + st.raw.size : changed.length),
  );
  if (full) {
    for (const [key, byLineage] of st.states) {
      keys.push(key);
      writeKeyStates(w, byLineage);
      ends.push(w.length);
    }
    // Keys restored and not touched since: their state is the text read.
    for (const [key, text] of st.raw) {
      keys.push(key);
      w.text(text);
      ends.push(w.length);
    }
  } else {
    for (const key of changed) {
      const byLineage = st.states.get(key);
      if (byLineage === undefined) deletes.push(key);
      else {
        keys.push(key);
        writeKeyStates(w, byLineage);
        ends.push(w.length);
      }
    }
  }
  return {
    offset: st.offset,
    controlSeq: st.ruleSet.controlSeq,
    meta: metaText(st, false),
    upserts: new CheckpointFields(keys, w.bytes(), ends),
    deletes,
    full,
    changed,
  };
}

/**
 * Marks the keys of a checkpoint that was not written as changed again, so the next incremental
 * checkpoint carries them (with their state as it is by then): no whole rewrite is needed.
 */
export function requeueCheckpoint(st: PartitionState, parts: CheckpointParts): void {
  for (const key of parts.changed) st.dirty.add(key);
}

function restoreMeta(
  json: MetaJSON,
  ruleSetAt: (controlSeq: number) => RuleSet | undefined,
  options: Omit<PartitionOptions, 'partition'>,
): PartitionState {
  if (json?.format !== FORMAT && json?.format !== FORMAT_V2 && json?.format !== FORMAT_V1)
    throw new SnapshotError(
      `unknown partition snapshot format ${JSON.stringify(json?.format)}; expected ${FORMAT}`,
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
  const st = createPartition(at(json.controlSeq), { ...options, partition: json.partition });
  st.offset = json.offset;
  st.maxTs = json.maxTs ?? -Infinity;
  st.watermark = json.watermark ?? -Infinity;
  st.timerN = json.timerN;
  for (const [ts, seq, id, e, cs, keyOrHits] of json.buffer) {
    const rs = at(cs);
    const event = e as Record<string, unknown>;
    const hostile = hasHostileObject(event);
    const key = typeof keyOrHits === 'string' ? keyOrHits : undefined;
    const hits: Hit[] =
      typeof keyOrHits === 'string'
        ? bufferedHits(rs, event, keyOrHits, hostile)
        : keyOrHits.map(([ruleId, hitKey, trigger, expected]) => {
            const rule = rs.rules.get(ruleId);
            if (rule === undefined)
              throw new SnapshotError(
                `buffered event ${seq} names rule "${ruleId}", which the rule set at ${cs} does not hold`,
              );
            return { rule, key: hitKey, trigger: trigger === 1, expected: expected === 1 };
          });
    const b: Buffered = {
      ts,
      seq,
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
  }
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
  ruleSetAt: (controlSeq: number) => RuleSet | undefined,
  options: Omit<PartitionOptions, 'partition'>,
): PartitionState {
  let json: PartitionJSON;
  try {
    json = JSON.parse(new TextDecoder().decode(bytes)) as PartitionJSON;
  } catch (e) {
    throw new SnapshotError('partition snapshot is not JSON', e);
  }
  const st = restoreMeta(json, ruleSetAt, options);
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
    return st;
  }
  for (const [key, lineages] of json.states) restoreKey(st, key, lineages);
  return st;
}

/**
 * Restores the fields of a v1 checkpoint (one per lineage and key: field `["<lineage>","<key>"]`,
 * value `[sup, state]`), and marks them and the keys changed: the next checkpoint writes the keys
 * in the current layout and deletes the old fields, in one atomic write.
 */
function restoreV1Fields(
  st: PartitionState,
  fields: Iterable<readonly [field: string, value: string]>,
): void {
  const byKey = new Map<string, LineageStateJSON[]>();
  for (const [field, value] of fields) {
    let sid: string, key: string, sup: number | null, op: unknown;
    try {
      [sid, key] = JSON.parse(field) as [string, string];
      [sup, op] = JSON.parse(value) as [number | null, unknown];
    } catch (e) {
      throw new SnapshotError(`checkpointed state field ${field} (format v1) is not JSON`, e);
    }
    const list = byKey.get(key) ?? [];
    list.push([sid, sup, op]);
    byKey.set(key, list);
    st.dirty.add(field);
  }
  for (const [key, lineages] of byKey) {
    restoreKey(st, key, lineages);
    st.dirty.add(key);
  }
}

/** Restores a partition from the parts a store holds: the last `meta` and every keyed-state field. */
export function restorePartitionParts(
  meta: string,
  fields: Iterable<readonly [field: string, value: string]>,
  ruleSetAt: (controlSeq: number) => RuleSet | undefined,
  options: Omit<PartitionOptions, 'partition'>,
): PartitionState {
  let json: MetaJSON;
  try {
    json = JSON.parse(meta) as MetaJSON;
  } catch (e) {
    throw new SnapshotError('checkpoint meta is not JSON', e);
  }
  const st = restoreMeta(json, ruleSetAt, options);
  if (json.format === FORMAT_V1) {
    restoreV1Fields(st, fields);
    return st;
  }
  // Decoded when the partition first touches each key (see PartitionState.raw): the partition
  // reads again as soon as the fields are read. A damaged field is reported then, naming its key.
  for (const [key, value] of fields) st.raw.set(key, value);
  return st;
}
