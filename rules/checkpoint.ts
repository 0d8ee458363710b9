import { SnapshotError } from './errors.js';
import { expiryBucket } from './expiry.js';
import { encodeField, fieldExpiry } from './checkpoint-field.js';
import type { LineageStateJSON } from './key-state-json.js';
import type { KeyStates } from './keyed-states.js';
import { decodeAllKeys, statesOf } from './keyed-access.js';
import type { PartitionState, RestoreOptions } from './partition-state.js';
import type { RuleSetAt } from './rule-set.js';
import type { DownstreamJSON } from './downstream.js';
import {
  afterHopSwitch,
  bufferedText,
  CHECKPOINT_FORMAT,
  FORMAT_V1,
  FORMAT_V4,
  FORMAT_V5,
  FORMAT_V6,
  metaText,
  restoreKey,
  restoreMeta,
  type BufferedJSON,
  type MetaJSON,
} from './snapshot.js';

/**
 * A checkpoint of a partition in parts: `meta` (offset, watermark, timers, rule sets in use;
 * written whole each time), keyed state as hash fields, one per key (the field is the key; the
 * value holds every lineage's state of that key), and buffered events in chunks, a hash field
 * each. Incremental by default: only the keys changed since the last call (`upserts`) and those
 * that no longer hold state (`deletes`), a chunk of the events buffered since (`buffered`) and
 * the chunks whose events are all released (`released`); `full` lists every key and one chunk of
 * every buffered event, for a store that rewrites its copy. Taking a checkpoint resets the change
 * tracking; a store that fails to write one hands it back with {@link requeueCheckpoint}.
 */
export interface CheckpointParts {
  readonly offset: number;
  readonly controlSeq: number;
  readonly meta: string;
  readonly upserts: readonly (readonly [field: string, value: string])[];
  readonly deletes: readonly string[];
  /** At most one chunk: `[field, JSON list of buffered events]`. */
  readonly buffered: readonly (readonly [field: string, value: string])[];
  readonly released: readonly string[];
  readonly full: boolean;
  /** The keys marked changed when the checkpoint was taken. */
  readonly changed: readonly string[];
  /** The buffered events after this sequence are in `buffered` (see `bufferCheckpointed`). */
  readonly bufferedAfter: number;
  /** The chunks `released` deletes, with their latest event times. */
  readonly releasedChunks: ReadonlyMap<string, number>;
  /** Lineage numbers the fields use that the store does not hold yet: `[number, lineage]` (v5). */
  readonly lineages: readonly (readonly [number, string])[];
  /** Lineage numbers no field uses any more (their lineage was dropped): the store deletes them after `lineages`. */
  readonly lineagesRemoved: readonly number[];
}

/** The hashes a store keeps a partition's checkpoint in, its meta aside (see {@link StoredParts}). */
export interface CheckpointHashes {
  readonly fields: Map<string, string>;
  readonly buffered: Map<string, string>;
  readonly lineages: Map<number, string>;
}

/**
 * Writes a checkpoint's parts into the hashes a store keeps, as the Redis store's SAVE script does
 * (its fence checks and the meta aside): a full checkpoint replaces the keyed state and the
 * buffered chunks but keeps the lineage numbers; the numbers given are written before those let go.
 */
export function writeCheckpointParts(h: CheckpointHashes, parts: CheckpointParts): void {
  if (parts.full) {
    h.fields.clear();
    h.buffered.clear();
  }
  for (const [f, v] of parts.upserts) h.fields.set(f, v);
  for (const f of parts.deletes) h.fields.delete(f);
  for (const [f, v] of parts.buffered) h.buffered.set(f, v);
  for (const f of parts.released) h.buffered.delete(f);
  for (const [n, sid] of parts.lineages) h.lineages.set(n, sid);
  for (const n of parts.lineagesRemoved) h.lineages.delete(n);
}

/** The text a checkpoint writes: its meta and every upserted field and value (UTF-16 units). */
export function checkpointPartsBytes(parts: CheckpointParts): number {
  let n = parts.meta.length;
  for (const [f, v] of parts.upserts) n += f.length + v.length;
  for (const [, sid] of parts.lineages) n += sid.length;
  for (const [f, v] of parts.buffered) n += f.length + v.length;
  return n;
}

/** Takes a checkpoint of the partition (see {@link CheckpointParts}). */
export function checkpointParts(st: PartitionState, full = false): CheckpointParts {
  const upserts: [string, string][] = [];
  const deletes: string[] = [];
  const changed = [...st.dirty];
  st.dirty.clear();
  if (full) {
    // Fields restored from before v6 are written with their expiry bucket, so decoded.
    if (st.legacyExpiry !== undefined) decodeAllKeys(st);
    for (const key of st.states.keys())
      upserts.push([key, encodeField(statesOf(st, key) as KeyStates, st.lineageIndex, st.windows)]);
    // Keys restored and not touched since: their state is the text read.
    for (const [key, text] of st.raw) upserts.push([key, text]);
  } else {
    for (const key of changed) {
      const states = statesOf(st, key);
      if (states === undefined) deletes.push(key);
      else upserts.push([key, encodeField(states, st.lineageIndex, st.windows)]);
    }
  }
  // After the fields: encoding them numbers the lineages they hold that had no number yet.
  const lineages = st.lineageIndex.take();
  // Buffered events: one chunk of those buffered since the last checkpoint (all of them for a
  // full one); the chunks all of whose events are released go.
  const bufferedAfter = full ? 0 : st.bufferCheckpointed;
  // (A full checkpoint replaces them all. Listed all the same: if it fails, they are still there.)
  const releasedChunks = new Map<string, number>();
  for (const [field, latest] of st.bufferChunks)
    if (full || latest <= st.watermark) releasedChunks.set(field, latest);
  for (const field of releasedChunks.keys()) st.bufferChunks.delete(field);
  let chunk = '';
  let latest = -Infinity;
  for (const b of st.buffer.unordered())
    if (b.pos > bufferedAfter) {
      chunk += (chunk === '' ? '[' : ',') + bufferedText(b, false);
      if (b.ts > latest) latest = b.ts;
    }
  const buffered: [string, string][] = [];
  if (chunk !== '') {
    // Named after the offset: a chunk written again after a failed write is named alike when no
    // record came since, and then holds the same events.
    const field = String(st.offset);
    buffered.push([field, chunk + ']']);
    st.bufferChunks.set(field, Math.max(latest, st.bufferChunks.get(field) ?? -Infinity));
  }
  st.bufferCheckpointed = st.offset;
  return {
    offset: st.offset,
    controlSeq: st.ruleSet.controlSeq,
    meta: metaText(st, false),
    upserts,
    deletes,
    buffered,
    released: [...releasedChunks.keys()],
    full,
    changed,
    bufferedAfter,
    releasedChunks,
    lineages: lineages.added,
    lineagesRemoved: lineages.removed,
  };
}

/**
 * Marks the keys and buffered events of a checkpoint that was not written as changed again, so
 * the next incremental checkpoint carries them (keys with their state as it is by then): no whole
 * rewrite is needed. Its chunk stays listed, since a write that timed out may still land: it is
 * deleted with its events' release like any other (a restore reads each event once).
 */
export function requeueCheckpoint(st: PartitionState, parts: CheckpointParts): void {
  for (const key of parts.changed) st.dirty.add(key);
  st.bufferCheckpointed = Math.min(st.bufferCheckpointed, parts.bufferedAfter);
  for (const [field, latest] of parts.releasedChunks) st.bufferChunks.set(field, latest);
  st.lineageIndex.requeue(parts.lineages, parts.lineagesRemoved);
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

/** What a store holds for a partition, as {@link restorePartitionParts} reads it. */
export interface StoredParts {
  readonly meta: string;
  /** Chunks of buffered events (v4 on): `[field, text]`; none for earlier formats, whose meta holds them. */
  readonly buffered: Iterable<readonly [field: string, value: string]>;
  /** Keyed-state fields: `[key, text]`. */
  readonly fields: Iterable<readonly [field: string, value: string]>;
  /** The lineage numbers the fields use (v5): `[number, lineage]`; none before v5. */
  readonly lineages?: Iterable<readonly [number: number, lineage: string]>;
}

/**
 * The control sequences of the rule sets a stored checkpoint needs: the one in force and those
 * its buffered events were judged under (the store holds them; see `ruleSetText`).
 * @throws SnapshotError when the meta is not JSON.
 */
export function checkpointRuleSets(meta: string): number[] {
  const json = parseMeta(meta);
  return [
    ...new Set([
      json.controlSeq,
      ...(json.ruleSets ?? []),
      ...(json.buffer ?? []).map((b) => b[4]),
      ...(json.down === undefined ? [] : downstreamRuleSeqs(json.down)),
    ]),
  ];
}

function downstreamRuleSeqs(d: DownstreamJSON): number[] {
  return [
    ...(d.pending ?? []).flatMap((list) => list.map(([c]) => c)),
    ...(d.ready ?? []).map(([c]) => c),
    ...(d.released ?? []),
  ];
}

function parseMeta(meta: string): MetaJSON {
  try {
    return JSON.parse(meta) as MetaJSON;
  } catch (e) {
    throw new SnapshotError('checkpoint meta is not JSON', e);
  }
}

/**
 * The buffered events of v4 chunks, and each chunk's latest event time. A chunk can hold events
 * released since it was written (the watermark passed them) and, after a write that timed out and
 * landed late, events another chunk holds too: each still-buffered event is kept once.
 */
function readChunks(
  chunks: Iterable<readonly [field: string, value: string]>,
  watermark: number,
): { entries: BufferedJSON[]; latest: Map<string, number> } {
  const entries: BufferedJSON[] = [];
  const latest = new Map<string, number>();
  const seen = new Set<number>();
  for (const [field, text] of chunks) {
    let list: BufferedJSON[];
    try {
      list = JSON.parse(text) as BufferedJSON[];
    } catch (e) {
      throw new SnapshotError(`checkpointed chunk ${field} of buffered events is not JSON`, e);
    }
    if (!Array.isArray(list))
      throw new SnapshotError(`checkpointed chunk ${field} of buffered events is not a list`);
    let last = -Infinity;
    for (const entry of list) {
      const [ts, seq] = entry;
      if (ts > last) last = ts;
      if (ts <= watermark || seen.has(seq)) continue;
      seen.add(seq);
      entries.push(entry);
    }
    latest.set(field, last);
  }
  return { entries, latest };
}

/** The stored lineage numbers, checked: each a positive integer naming one lineage, each lineage once. */
function checkedLineages(
  entries: Iterable<readonly [number, string]>,
): (readonly [number, string])[] {
  const out: (readonly [number, string])[] = [];
  const seen = new Set<string>();
  for (const [n, sid] of entries) {
    if (!Number.isSafeInteger(n) || n < 1 || typeof sid !== 'string' || sid === '')
      throw new SnapshotError(
        `checkpointed lineage number ${JSON.stringify(n)} (${JSON.stringify(sid)}) is not a positive integer naming a lineage`,
      );
    if (seen.has(sid)) throw new SnapshotError(`checkpointed lineage ${sid} has two numbers`);
    seen.add(sid);
    out.push([n, sid]);
  }
  return out;
}

/** Restores a partition from the parts a store holds: its last meta, buffered events and keyed-state fields. */
export function restorePartitionParts(
  stored: StoredParts,
  ruleSetAt: RuleSetAt,
  options: RestoreOptions,
): PartitionState {
  const json = parseMeta(stored.meta);
  const chunks = readChunks(stored.buffered, json.watermark ?? -Infinity);
  const st = restoreMeta(json, chunks.entries, ruleSetAt, options);
  if (
    json.format === CHECKPOINT_FORMAT ||
    json.format === FORMAT_V6 ||
    json.format === FORMAT_V5 ||
    json.format === FORMAT_V4
  )
    st.bufferCheckpointed = st.offset;
  st.lineageIndex.restore(checkedLineages(stored.lineages ?? []));
  for (const [field, latest] of chunks.latest) st.bufferChunks.set(field, latest);
  if (json.format === FORMAT_V1) {
    restoreV1Fields(st, stored.fields);
    // Every key was decoded: each is looked at once event time has moved past the restore.
    const bucket = expiryBucket((json.watermark ?? 0) + 1);
    for (const key of st.states.keys()) {
      st.states.setExp(st.states.keyNumber(key), bucket);
      st.expiry.add(key, bucket);
    }
    return afterHopSwitch(json, st);
  }
  // Decoded when the partition first touches each key (see PartitionState.raw): the partition
  // reads again as soon as the fields are read. A damaged field is reported then, naming its key.
  // Each is listed for expiry from the bucket at the end of its text; fields written before v6
  // have none, and their keys are all looked at once event time has moved past the restore.
  st.legacyExpiry =
    json.format === CHECKPOINT_FORMAT || json.format === FORMAT_V6
      ? json.legacyExpiry
      : expiryBucket((json.watermark ?? 0) + 1);
  for (const [key, value] of stored.fields) {
    st.raw.set(key, value);
    const exp = fieldExpiry(value) ?? st.legacyExpiry;
    if (exp !== undefined) st.expiry.add(key, exp);
  }
  // No field to look at: nothing for the bucket to do (and nothing to carry in later metas).
  if (st.raw.size === 0) st.legacyExpiry = undefined;
  return afterHopSwitch(json, st);
}
