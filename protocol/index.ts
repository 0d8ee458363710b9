/**
 * The protocol of Vigil's logs, pure: stream and subject names, the partitioner, what a record of
 * a partition's log is (event, epoch marker, tick, probe, dead letter) and the payloads Vigil
 * writes, and the fold of `CONTROL` into rule sets. The live path (`service/`), the back-test
 * and the tests' single-threaded reference all read the logs through it, so they cannot drift.
 */
export { foldControl, foldVersions } from './fold-control.js';
export {
  classifyHop,
  downstreamRecord,
  hopPayload,
  REKEY_SUBJECTS,
  rekeySubject,
  type HopClass,
} from './hop-wire.js';
export { partitionKeyFields, partitionOf } from './partitioner.js';
export { storedAtMs } from './stored-at.js';
export { partitionRecord, type StoredMessage } from './partition-record.js';
export {
  classifyRecord,
  DeadReason,
  markerPayload,
  PROBE_KEY,
  PROBE_PAYLOAD,
  tickPayload,
  type RecordClass,
} from './record-class.js';
export {
  alertSubject,
  CONTROL_SUBJECT,
  DLQ_HEADERS,
  dlqSubject,
  eventsSubjects,
  eventSubject,
  isValidKey,
  MARKER_KEY,
  markerSubject,
  partitionedEventSubject,
  partitionFilter,
  partitionMapping,
  Streams,
  TICK_KEY,
  tickSubject,
} from './subjects.js';
