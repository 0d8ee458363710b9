/**
 * The messages between the main thread (worker-pool.ts) and a worker thread (worker.ts), and what
 * a worker is started with. Kept apart so the pool depends on the protocol, not on the thread's code.
 */
import type { PartitionStartTimings } from '../status.js';
import type { VigilOptions } from '../config.js';
import type { GcPause } from '../metrics/gc-pauses.js';

/** A partition the main thread hands a worker, with the fencing token of its lease (0: no leases). */
export interface PartitionGrant {
  readonly partition: number;
  readonly token: number;
}

/** What the main thread gives a worker. */
export interface WorkerInit {
  readonly index: number;
  readonly options: VigilOptions;
  /** Partitions to run from the start (a restarted worker gets its predecessor's). */
  readonly partitions: readonly PartitionGrant[];
  /**
   * The streams exist (checked by the main thread). Until they do, or a `streams-ready` message
   * says so, the worker loads and connects but does not follow `CONTROL`.
   */
  readonly streamsReady: boolean;
}

/** Why a partition stopped on a worker: handed over, lease lost, or a checkpoint refused by the fence. */
export type PartitionStopReason = 'released' | 'lost' | 'fenced';

/** Messages between the main thread and a worker. */
export type ToWorker =
  | { readonly op: 'metrics'; readonly id: number }
  | { readonly op: 'stop' }
  | { readonly op: 'streams-ready' }
  | ({ readonly op: 'start-partition' } & PartitionGrant)
  | {
      readonly op: 'stop-partition';
      readonly partition: number;
      readonly reason: 'released' | 'lost';
    };
export type FromWorker =
  | { readonly op: 'ready' }
  | { readonly op: 'metrics'; readonly id: number; readonly metrics: unknown }
  /** The thread stopped cleanly; its final metrics, for the totals to carry over. */
  | { readonly op: 'stopped'; readonly metrics: unknown }
  /** Whether the worker's last checkpoints succeeded (readiness shows it). */
  | { readonly op: 'checkpoints'; readonly ok: boolean }
  /** The worker's NATS connection went away or came back: it judges nothing meanwhile. */
  | { readonly op: 'nats'; readonly connected: boolean }
  /** A partition restored and reading, with what its start took (ms). */
  | ({ readonly op: 'partition-started'; readonly partition: number } & PartitionStartTimings)
  /** The rule sets re-key to a key space: its partitions run beside the event log's (see `rules/source-hop.ts`). */
  | { readonly op: 'key-space'; readonly space: string }
  /** A partition applied a marker: the control sequence now in force there. */
  | {
      readonly op: 'applied';
      readonly partition: number;
      readonly controlSeq: number;
      readonly activationMs: number | undefined;
    }
  | {
      readonly op: 'partition-stopped';
      readonly partition: number;
      readonly reason: PartitionStopReason;
      /** A final checkpoint covers everything the partition processed. */
      readonly checkpointed: boolean;
    }
  /**
   * The worker asks to be replaced by a new thread (its heap keeps room it no longer uses): the
   * pool answers with `stop` and starts a new thread with the same partitions once it has ended.
   */
  | { readonly op: 'recycle'; readonly why: string }
  /** A garbage-collection pause of the worker of at least `GC_REPORT_MS`. */
  | { readonly op: 'gc-pause'; readonly pause: GcPause }
  | { readonly op: 'log'; readonly level: 'info' | 'warn' | 'error'; readonly message: string };
