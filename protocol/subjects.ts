/** Subjects and stream names of Vigil's logs, in one place. */

export const Streams = {
  events: 'EVENTS',
  control: 'CONTROL',
  alerts: 'ALERTS',
  dlq: 'DLQ',
  /** The re-keying hop: what source partitions send the downstream partitions of key spaces. */
  rekey: 'REKEY',
} as const;

export const CONTROL_SUBJECT = 'vigil.control';

/** Reserved keys: epoch markers and time ticks travel in the partition logs under these. */
export const MARKER_KEY = '_vigil';
export const TICK_KEY = '_tick';

/** Where a producer publishes an event; the server maps it to `events.<key>.<p>`. */
export const eventSubject = (key: string): string => `events.${key}`;
/** An event's subject after the mapping. */
export const partitionedEventSubject = (key: string, partition: number): string =>
  `events.${key}.${partition}`;
/** The filter of one partition's consumer: events, markers and ticks of partition `p`, in one order. */
export const partitionFilter = (partition: number): string => `events.*.${partition}`;
export const markerSubject = (partition: number): string => `events.${MARKER_KEY}.${partition}`;
export const tickSubject = (partition: number): string => `events.${TICK_KEY}.${partition}`;
export const alertSubject = (severity: string, ruleId: string): string =>
  `alerts.${severity}.${ruleId}`;
export const dlqSubject = (reason: string): string => `vigil.dlq.${reason}`;

/**
 * The headers of a dead letter in `DLQ`: why it was refused and where it came from. Its payload
 * is the original message's, so that it can be read and re-driven as it was.
 */
export const DLQ_HEADERS = {
  reason: 'Vigil-Reason',
  error: 'Vigil-Error',
  sourceStream: 'Vigil-Source-Stream',
  sourceSubject: 'Vigil-Source-Subject',
  sourceSeq: 'Vigil-Source-Seq',
  rule: 'Vigil-Rule',
} as const;

/** A key must be one subject token: no dots, wildcards or whitespace. */
export function isValidKey(key: string): boolean {
  return key.length > 0 && !/[.*>\s]/.test(key);
}

/** The `mappings` line of nats-server's config that partitions `events.<key>` into P partitions. */
export function partitionMapping(partitions: number): string {
  return `mappings = { "events.*": "events.{{wildcard(1)}}.{{partition(${partitions},1)}}" }`;
}

/**
 * The subjects `EVENTS` stores: `events.*.<p>` for each partition p in 0..P-1, so a record
 * published straight to a partition that does not exist (`events.k.16`, `events.k.abc`) is
 * refused by the server (a JetStream publish gets an error at once) instead of being stored
 * where no partition's consumer would ever read it.
 */
export function eventsSubjects(partitions: number): string[] {
  return Array.from({ length: partitions }, (_, p) => partitionFilter(p));
}
