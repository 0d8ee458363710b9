import { partitionOf } from './partitioner.js';
import { MARKER_KEY, TICK_KEY } from './subjects.js';

/** Reserved key of the start-up probes that check the server's partition mapping (`_probe`, `_probe1` … `_probe15`). */
export const PROBE_KEY = '_probe';
/** What a probe carries, so that a record under a probe key is told from a producer's. */
export const PROBE_PAYLOAD = '{"vigil":"probe"}';

const encoder = new TextEncoder();

/** An epoch marker's payload: from here on, the rules after `CONTROL` sequence `controlSeq` are in force. */
export function markerPayload(controlSeq: number): Uint8Array {
  return encoder.encode(JSON.stringify({ vigil: 'epoch', controlSeq }));
}

/** A tick's payload: event time `ts` (ms) on an idle partition. */
export function tickPayload(ts: number): Uint8Array {
  return encoder.encode(JSON.stringify({ vigil: 'tick', ts }));
}

/** Why a record of a partition's log is judged by no rule and goes to the dead-letter stream. */
export const DeadReason = {
  badMarker: 'bad-marker',
  badTick: 'bad-tick',
  reservedKey: 'reserved-key',
  wrongPartition: 'wrong-partition',
  badSubject: 'bad-subject',
} as const;
export type DeadReason = (typeof DeadReason)[keyof typeof DeadReason];

/** What a record of `EVENTS` is, read from its subject (`events.<key>.<p>`) and, for Vigil's own records, its payload. */
export type RecordClass =
  | { readonly kind: 'event'; readonly key: string }
  | { readonly kind: 'marker'; readonly controlSeq: number }
  | { readonly kind: 'tick'; readonly ts: number }
  | { readonly kind: 'probe' }
  | { readonly kind: 'dead'; readonly reason: DeadReason; readonly message: string };

const decoder = new TextDecoder();

function system(data: Uint8Array, kind: string): Record<string, unknown> | undefined {
  try {
    const v = JSON.parse(decoder.decode(data)) as unknown;
    return typeof v === 'object' && v !== null && (v as Record<string, unknown>).vigil === kind
      ? (v as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

function isProbeKey(key: string): boolean {
  if (!key.startsWith(PROBE_KEY)) return false;
  const n = key.slice(PROBE_KEY.length);
  return n === '' || /^(?:[1-9]|1[0-5])$/.test(n);
}

function isProbePayload(data: Uint8Array): boolean {
  // `{}`: the probes of earlier versions, which may still be in a stream's log.
  if (data.byteLength === 2 && data[0] === 0x7b && data[1] === 0x7d) return true;
  return system(data, 'probe') !== undefined;
}

/**
 * Classifies one record of partition `partition`'s log: the live path (partition runner), the
 * back-test's replay and the tests' single-threaded reference all read records through this one
 * function, so they cannot disagree on what is an event, a marker, a tick or a dead letter. Pure.
 */
export function classifyRecord(
  subject: string,
  data: Uint8Array,
  partition: number,
  partitions: number,
): RecordClass {
  // events.<key>.<p>: the key is the second token, the partition the third.
  const dot = subject.indexOf('.');
  const end = subject.indexOf('.', dot + 1);
  if (dot < 0 || end < 0 || subject.indexOf('.', end + 1) >= 0)
    return dead(DeadReason.badSubject, `subject "${subject}" is not events.<key>.<partition>`);
  const key = subject.slice(dot + 1, end);
  const token = subject.slice(end + 1);
  if (token !== tokenOf(partition))
    return dead(
      DeadReason.badSubject,
      `subject "${subject}" names partition "${token}", not ${partition} (partitions are 0..${partitions - 1})`,
    );
  if (key === MARKER_KEY) {
    const c = system(data, 'epoch')?.controlSeq;
    return typeof c === 'number' && Number.isSafeInteger(c) && c >= 1
      ? { kind: 'marker', controlSeq: c }
      : dead(
          DeadReason.badMarker,
          'an epoch marker must be {"vigil":"epoch","controlSeq":<CONTROL sequence>}',
        );
  }
  if (key === TICK_KEY) {
    const ts = system(data, 'tick')?.ts;
    return typeof ts === 'number' && Number.isSafeInteger(ts)
      ? { kind: 'tick', ts }
      : dead(DeadReason.badTick, 'a tick must be {"vigil":"tick","ts":<integer ms>}');
  }
  if (key.startsWith('_')) {
    if (isProbeKey(key) && isProbePayload(data)) return { kind: 'probe' };
    return dead(
      DeadReason.reservedKey,
      `key "${key}": keys starting with "_" are reserved for Vigil; publish to events.<key> with another key`,
    );
  }
  const home = partitionOf(key, partitions);
  if (home !== partition)
    return dead(
      DeadReason.wrongPartition,
      `key "${key}" belongs to partition ${home}, not ${partition}; publish to events.<key> and let the server map it`,
    );
  return { kind: 'event', key };
}

/** Partition numbers as subject tokens, made once: every record's token is compared with one. */
const tokens: string[] = [];
function tokenOf(p: number): string {
  return (tokens[p] ??= String(p));
}

function dead(reason: DeadReason, message: string): RecordClass {
  return { kind: 'dead', reason, message };
}
