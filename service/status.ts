import type { Application } from 'express';
import type { Registry } from 'prom-client';
import type { Activation } from './control/activation-log.js';

/*
 * What the service shows of itself to whatever runs beside it in the process (the control plane's
 * status and stats routes): the only part of service/ the control plane may import, so that the
 * runtime can change inside without the API noticing.
 */

/** What starting a partition took on its worker, in ms (`/readyz` shows it). */
export interface PartitionStartTimings {
  /** Reading its checkpoint from Redis (0 without one). */
  readonly loadMs: number;
  /** Rebuilding its state from the checkpoint. */
  readonly restoreMs: number;
  /** Creating its consumer. */
  readonly consumerMs: number;
  /** Keys of keyed state restored. */
  readonly keys: number;
}

/** How a partition running on a worker started: when it began reading, and what its start took. */
export interface PartitionStart extends PartitionStartTimings {
  readonly partition: number;
  /** When the worker reported it restored and reading (ms since the epoch). */
  readonly at: number;
}

/** What `/readyz` shows of one worker. */
export interface WorkerStatus {
  readonly worker: number;
  /** Partitions this worker runs or is starting (they are held by this process). */
  readonly partitions: number[];
  /** Those still restoring from their checkpoint. */
  readonly starting: number[];
  /** Those running: since when, and what their restore took (a precise signal for recovery time). */
  readonly started: PartitionStart[];
  readonly ready: boolean;
  readonly checkpointsOk: boolean;
  /** Whether its NATS connection is up: while it is away, its partitions judge nothing. */
  readonly natsConnected: boolean;
  readonly restarts: number;
  /**
   * Times its thread was replaced by a new one to hand back heap room after expiry (not a
   * failure: its partitions stopped with final checkpoints and restored at once).
   */
  readonly recycles: number;
}

/** The running service as the control plane reads it. */
export interface ServiceStatus {
  /** This process judges events now: every partition it holds is running, caught up with CONTROL and checkpointing. */
  readonly ready: boolean;
  /** Each worker thread: its partitions, readiness and restarts. */
  status(): WorkerStatus[];
  /** The service's metrics, merged over its workers (what `/metrics` exposes). */
  metrics(): Promise<Registry>;
  /** How recent control messages took effect on the partitions of this process. */
  readonly activations: { activations(): Activation[] };
}

/** Mounts more routes on the service's HTTP server (the control plane's `/v1` API), before it listens. */
export type RouteHook = (app: Application, status: ServiceStatus) => void;
