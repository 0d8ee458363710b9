import { ByteWriter } from './byte-writer.js';
import { CheckpointFields } from './checkpoint-fields.js';
import { SnapshotError } from './errors.js';
import { writeKeyStates, type LineageStateJSON } from './key-state-json.js';
import type { Buffered, PartitionOptions, PartitionState } from './partition.js';
import type { RuleSet } from './rule-set.js';
import {
  bufferedText,
  FORMAT_V1,
  metaText,
  restoreKey,
  restoreMeta,
  type MetaJSON,
} from './snapshot.js';

/**
 * A checkpoint of a partition in parts: `meta` (offset, watermark, timers, rule sets in use;
 * written whole each time), keyed state as hash fields, one per key (the field is the key; the
 * value holds every lineage's state of that key), and buffered events as fields of their own
 * (the field is the event's sequence). Incremental by default: only the keys changed since the
 * last call (`upserts`) and those that no longer hold state (`deletes`), the events buffered since
 * (`buffered`) and those released (`released`); `full` lists every key and buffered event, for a
 * store that rewrites its copy. Taking a checkpoint resets the change tracking; a store that
 * fails to write one hands it back with {@link requeueCheckpoint}.
 */
export interface CheckpointParts {
  readonly offset: number;
  readonly controlSeq: number;
  readonly meta: string;
  readonly upserts: CheckpointFields;
  readonly deletes: readonly string[];
  readonly buffered: CheckpointFields;
  readonly released: readonly string[];
  readonly full: boolean;
  /** The keys marked changed when the checkpoint was taken. */
  readonly changed: readonly string[];
  /** The buffered events marked changed when it was taken (see `PartitionState.bufferDirty`). */
  readonly changedBuffer: ReadonlyMap<number, Buffered | undefined>;
}

/**
 * The size of what a checkpoint writes: its meta and field names in UTF-16 units, its values in
 * bytes (the same for ASCII text, which nearly all of it is).
 */
export function checkpointPartsBytes(parts: CheckpointParts): number {
  let n = parts.meta.length + parts.upserts.valueBytes + parts.buffered.valueBytes;
  for (const f of parts.upserts.keys) n += f.length;
  for (const f of parts.buffered.keys) n += f.length;
  return n;
}

/** Room for a changed key's value to begin with; the writer doubles when it needs more. */
const BYTES_PER_KEY_GUESS = 1024;
/** The same for a buffered event (about 200 bytes of payload, and the rest of its entry). */
const BYTES_PER_EVENT_GUESS = 320;

/** Takes a checkpoint of the partition (see {@link CheckpointParts}). */
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
  const changedBuffer = new Map(st.bufferDirty);
  st.bufferDirty.clear();
  const buffered: Buffered[] = [];
  const released: string[] = [];
  if (full) buffered.push(...st.buffer.sorted());
  else
    for (const [seq, b] of changedBuffer)
      if (b === undefined) released.push(String(seq));
      else buffered.push(b);
  const bw = new ByteWriter(BYTES_PER_EVENT_GUESS * buffered.length);
  const bufferedEnds: number[] = [];
  for (const b of buffered) {
    bw.text(bufferedText(b, false));
    bufferedEnds.push(bw.length);
  }
  return {
    offset: st.offset,
    controlSeq: st.ruleSet.controlSeq,
    meta: metaText(st, false),
    upserts: new CheckpointFields(keys, w.bytes(), ends),
    deletes,
    buffered: new CheckpointFields(
      buffered.map((b) => String(b.seq)),
      bw.bytes(),
      bufferedEnds,
    ),
    released,
    full,
    changed,
    changedBuffer,
  };
}

/**
 * Marks the keys and buffered events of a checkpoint that was not written as changed again, so
 * the next incremental checkpoint carries them (keys with their state as it is by then): no whole
 * rewrite is needed. A change since the checkpoint was taken stays as it is: an event released
 * since then is deleted (never written, it is not in the store; deleting it is harmless).
 */
export function requeueCheckpoint(st: PartitionState, parts: CheckpointParts): void {
  for (const key of parts.changed) st.dirty.add(key);
  for (const [seq, b] of parts.changedBuffer)
    if (!st.bufferDirty.has(seq)) st.bufferDirty.set(seq, b);
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
  /** Buffered events (v4 on): `[seq, text]`; none for earlier formats, whose meta holds them. */
  readonly buffered: Iterable<readonly [field: string, value: string]>;
  /** Keyed-state fields: `[key, text]`. */
  readonly fields: Iterable<readonly [field: string, value: string]>;
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
    ]),
  ];
}

function parseMeta(meta: string): MetaJSON {
  try {
    return JSON.parse(meta) as MetaJSON;
  } catch (e) {
    throw new SnapshotError('checkpoint meta is not JSON', e);
  }
}

/** Restores a partition from the parts a store holds: its last meta, buffered events and keyed-state fields. */
export function restorePartitionParts(
  stored: StoredParts,
  ruleSetAt: (controlSeq: number) => RuleSet | undefined,
  options: Omit<PartitionOptions, 'partition'>,
): PartitionState {
  const json = parseMeta(stored.meta);
  const st = restoreMeta(json, stored.buffered, ruleSetAt, options);
  if (json.format === FORMAT_V1) {
    restoreV1Fields(st, stored.fields);
    return st;
  }
  // Decoded when the partition first touches each key (see PartitionState.raw): the partition
  // reads again as soon as the fields are read. A damaged field is reported then, naming its key.
  for (const [key, value] of stored.fields) st.raw.set(key, value);
  return st;
}
