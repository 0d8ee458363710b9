import type { NatsConnection } from '@nats-io/transport-node';
import { nanos } from '@nats-io/transport-node';
import {
  jetstream,
  jetstreamManager,
  type JetStreamManager,
  type StreamConfig,
} from '@nats-io/jetstream';
import { ServiceError, ServiceErrorCode } from './errors.js';
import { partitionOf } from './partitioner.js';
import {
  CONTROL_SUBJECT,
  eventSubject,
  partitionedEventSubject,
  partitionMapping,
  Streams,
} from './subjects.js';

/** Reserved key of the start-up probe that checks the server's partition mapping. */
export const PROBE_KEY = '_probe';

function streamConfigs(duplicateWindowMs: number): (Partial<StreamConfig> & { name: string })[] {
  const duplicate_window = nanos(duplicateWindowMs);
  return [
    { name: Streams.events, subjects: ['events.*.*'], duplicate_window },
    { name: Streams.control, subjects: [CONTROL_SUBJECT], duplicate_window },
    { name: Streams.alerts, subjects: ['alerts.>'], duplicate_window },
    { name: Streams.dlq, subjects: ['vigil.dlq.>'], duplicate_window },
  ];
}

/**
 * Creates the four streams of DESIGN §3 or checks existing ones: subjects must match, and the
 * duplicate window is raised to the configured one (read back from the server, which may ignore
 * a setting it does not support).
 */
export async function ensureStreams(
  jsm: JetStreamManager,
  duplicateWindowMs: number,
): Promise<void> {
  for (const cfg of streamConfigs(duplicateWindowMs)) {
    const name = cfg.name;
    let info = await jsm.streams.info(name).catch(() => undefined);
    if (info === undefined) info = await jsm.streams.add(cfg);
    const subjects = info.config.subjects ?? [];
    if (JSON.stringify(subjects) !== JSON.stringify(cfg.subjects)) {
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

/**
 * Publishes probes to `events.<probe>` and checks that the server mapped each to the partition
 * Vigil computes (DESIGN §3). Without the mapping, partitioned consumers would see nothing; with
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
        await js.publish(eventSubject(key), '{}', {
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
