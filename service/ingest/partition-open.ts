import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type {
  CheckpointLoader,
  LoadedCheckpoint,
  RestoreTimings,
} from '../checkpoint/checkpointer.js';
import type { EventSource } from './event-source.js';
import { jetStreamPartitionSource, type LogSpec } from './partition-consumer.js';
import type { PartitionState } from '../../rules/index.js';

/** A partition's state as restored from its checkpoint, and the offset it covers. */
export interface RestoredPartition {
  readonly state: PartitionState;
  readonly offset: number;
  readonly timings: RestoreTimings;
}

/** What a partition needs before its runner starts: its consumer and its restored state. */
export interface OpenedPartition {
  readonly source: EventSource;
  /** Undefined without checkpoints, or when the partition has none yet. */
  readonly restored: RestoredPartition | undefined;
  /** How long creating the consumer took (ms). */
  readonly consumerMs: number;
}

/**
 * Opens a partition for a new owner: reads its checkpoint (through `loader`, which may have read
 * it ahead) and creates its consumer from the checkpoint's offset while the state is read and
 * rebuilt, since one waits on NATS and the other on Redis and this thread. The offset is read
 * first, alone; no one else can move the checkpoint while this owner holds the lease, and if it
 * moved anyway the consumer is made again from the new one. Resolves undefined, with nothing left
 * open, when the partition is `dropped()` before its state is restored.
 */
export async function openPartition(d: {
  readonly partition: number;
  readonly nats: { readonly nc: NatsConnection; readonly jsm: JetStreamManager };
  /**
   * Undefined without checkpoints. `restore` rebuilds the state from a checkpoint `loader` read
   * (the worker's restores take turns).
   */
  readonly checkpoints:
    | {
        readonly loader: CheckpointLoader;
        readonly restore: (loaded: LoadedCheckpoint) => Promise<RestoredPartition>;
      }
    | undefined;
  readonly dropped: () => boolean;
  /** The log read: partition `partition` of the event log unless given (a downstream partition's). */
  readonly log?: LogSpec;
}): Promise<OpenedPartition | undefined> {
  const p = d.partition;
  const early = (await d.checkpoints?.loader.offset(p)) ?? 0;
  const consumerStarted = performance.now();
  let consumerMs = 0;
  const create = (from: number): Promise<EventSource> => {
    const c = jetStreamPartitionSource(d.nats, p, from + 1, d.log);
    // Its failure surfaces below, when it is awaited.
    void c.then(
      () => (consumerMs = performance.now() - consumerStarted),
      () => undefined,
    );
    return c;
  };
  const abandon = (c: Promise<EventSource>): void =>
    void c.then((x) => x.stop()).catch(() => undefined);
  let creating = create(early);
  let held: Awaited<ReturnType<CheckpointLoader['take']>> | undefined;
  try {
    held = await d.checkpoints?.loader.take(p);
  } catch (e) {
    abandon(creating);
    throw e;
  }
  const loaded = held?.loaded;
  try {
    if (d.dropped()) {
      abandon(creating);
      return undefined;
    }
    const offset = loaded?.stored.offset ?? 0;
    if (offset !== early) {
      abandon(creating);
      creating = create(offset);
    }
    let restored: RestoredPartition | undefined;
    try {
      restored = loaded === undefined ? undefined : await d.checkpoints?.restore(loaded);
    } catch (e) {
      abandon(creating);
      throw e;
    }
    // Its text is garbage now: the next partition's read may start.
    held?.release();
    const source = await creating;
    return { source, restored, consumerMs };
  } finally {
    held?.release();
  }
}
