import type { NatsConnection } from '@nats-io/transport-node';
import { nanos } from '@nats-io/transport-node';
import {
  jetstream,
  jetstreamManager,
  type JetStreamManager,
  type StreamConfig,
} from '@nats-io/jetstream';
import { ServiceError, ServiceErrorCode } from '../errors.js';
import {
  CONTROL_SUBJECT,
  eventsSubjects,
  eventSubject,
  partitionedEventSubject,
  partitionMapping,
  partitionOf,
  PROBE_KEY,
  PROBE_PAYLOAD,
  REKEY_SUBJECTS,
  Streams,
} from '../../protocol/index.js';

function streamConfigs(
  duplicateWindowMs: number,
  partitions: number,
): (Partial<StreamConfig> & { name: string })[] {
  const duplicate_window = nanos(duplicateWindowMs);
  return [
    { name: Streams.events, subjects: eventsSubjects(partitions), duplicate_window },
    { name: Streams.control, subjects: [CONTROL_SUBJECT], duplicate_window },
    { name: Streams.alerts, subjects: ['alerts.>'], duplicate_window },
    { name: Streams.dlq, subjects: ['vigil.dlq.>'], duplicate_window },
    { name: Streams.rekey, subjects: [...REKEY_SUBJECTS], duplicate_window },
  ];
}

/** The subjects of an `EVENTS` stream made by a version before the partition subjects. */
const LEGACY_EVENTS_SUBJECTS = ['events.*.*'];

/**
 * Creates the five streams (`EVENTS`, `CONTROL`, `ALERTS`, `DLQ`, `REKEY`) or checks existing ones:
 * subjects must match (an `EVENTS` stream of an earlier version, on `events.*.*`, is left as it
 * is here: {@link adoptPartitionSubjects} narrows it once the mapping is verified), and the
 * duplicate window is raised to the configured one (read back from the server, which may ignore
 * a setting it does not support).
 */
export async function ensureStreams(
  jsm: JetStreamManager,
  duplicateWindowMs: number,
  partitions: number,
): Promise<void> {
  for (const cfg of streamConfigs(duplicateWindowMs, partitions)) {
    const name = cfg.name;
    let info = await jsm.streams.info(name).catch(() => undefined);
    if (info === undefined) info = await jsm.streams.add(cfg);
    const subjects = info.config.subjects ?? [];
    const legacy =
      name === Streams.events &&
      JSON.stringify(subjects) === JSON.stringify(LEGACY_EVENTS_SUBJECTS);
    if (name === Streams.events && !legacy && !sameList(subjects, cfg.subjects ?? []))
      throw new ServiceError(
        ServiceErrorCode.StreamConfig,
        `stream EVENTS has the subjects ${subjects.slice(0, 3).join(', ')}${subjects.length > 3 ? ', …' : ''} (${subjects.length}), but VIGIL_PARTITIONS=${partitions} needs events.*.0 … events.*.${partitions - 1}: the partition count is fixed for the life of the stream; start with the count it was made with`,
      );
    if (!legacy && !sameList(subjects, cfg.subjects ?? [])) {
      throw new ServiceError(
        ServiceErrorCode.StreamConfig,
        `stream ${name} exists with subjects ${JSON.stringify(subjects)}, but Vigil needs ${JSON.stringify(cfg.subjects)}; delete or fix the stream`,
      );
    }
    if (info.config.duplicate_window < (cfg.duplicate_window as number)) {
      info = await jsm.streams.update(name, {
        ...info.config,
        duplicate_window: cfg.duplicate_window as number,
      });
    }
    if (info.config.duplicate_window < (cfg.duplicate_window as number)) {
      throw new ServiceError(
        ServiceErrorCode.StreamConfig,
        `stream ${name} keeps a duplicate window of ${info.config.duplicate_window / 1e6} ms, below the ${duplicateWindowMs} ms Vigil needs for exactly-once alerts`,
      );
    }
  }
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/**
 * Gives an `EVENTS` stream made by an earlier version (subjects `events.*.*`) the subjects of the
 * partitions, `events.*.0` … `events.*.<P-1>`. Call it after {@link verifyMapping}: a process
 * started with the wrong partition count must not narrow the stream every process shares.
 */
export async function adoptPartitionSubjects(
  jsm: JetStreamManager,
  partitions: number,
): Promise<void> {
  const info = await jsm.streams.info(Streams.events);
  if (JSON.stringify(info.config.subjects ?? []) !== JSON.stringify(LEGACY_EVENTS_SUBJECTS)) return;
  await jsm.streams.update(Streams.events, {
    ...info.config,
    subjects: eventsSubjects(partitions),
  });
}

/**
 * Publishes probes to `events.<probe>` and checks that the server mapped each to the partition
 * Vigil computes. Without the mapping, partitioned consumers would see nothing; with
 * another partition count, keys would land in the wrong partitions. One probe can agree with a
 * wrong count by chance, so probing goes on until no other count (up to 1024) fits what was seen.
 */
export async function verifyMapping(nc: NatsConnection, partitions: number): Promise<void> {
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const fix = `add this line to the nats-server configuration and restart it:\n  ${partitionMapping(partitions)}`;
  const seen: { key: string; p: number }[] = [];
  for (let i = 0; i < 16; i++) {
    const key = i === 0 ? PROBE_KEY : `${PROBE_KEY}${i}`;
    let seq: number;
    try {
      seq = (
        await js.publish(eventSubject(key), PROBE_PAYLOAD, {
          msgID: `probe-${Date.now()}-${Math.random()}`,
          timeout: 5000,
        })
      ).seq;
    } catch (e) {
      throw new ServiceError(
        ServiceErrorCode.MappingMissing,
        `events published to events.<key> reach no stream: the server does not partition them; ${fix}`,
        { cause: e },
      );
    }
    const stored = await jsm.streams.getMessage(Streams.events, { seq });
    const expected = partitionedEventSubject(key, partitionOf(key, partitions));
    if (stored?.subject !== expected) {
      throw new ServiceError(
        ServiceErrorCode.MappingMissing,
        `a probe published to events.${key} landed on ${stored?.subject ?? 'nothing'}, not ${expected}: the server's partition mapping does not match VIGIL_PARTITIONS=${partitions}; ${fix}`,
      );
    }
    seen.push({ key, p: partitionOf(key, partitions) });
    let others = 0;
    for (let q = 1; q <= 1024 && others === 0; q++)
      if (q !== partitions && seen.every((s) => partitionOf(s.key, q) === s.p)) others++;
    if (others === 0) return;
  }
}
