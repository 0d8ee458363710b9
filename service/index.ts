/** Vigil's runtime: partitions on NATS JetStream, shard workers, control fan-out, alerts, health and metrics. */
export { DEFAULT_OPTIONS, ENV, resolveOptions, type VigilOptions } from './config.js';
export { ServiceError, ServiceErrorCode } from './errors.js';
export { startService, type RunningService, type ServiceHooks } from './start-service.js';
export {
  type PartitionStart,
  type PartitionStartTimings,
  type RouteHook,
  type ServiceStatus,
  type WorkerStatus,
} from './status.js';
export { stopOnSignals } from './stop-on-signals.js';
export { type EventSource, type LogRecord } from './ingest/event-source.js';
export { parseAckReply, type AckReplyInfo } from './ingest/ack-reply.js';
export { jetStreamPartitionSource } from './ingest/partition-consumer.js';
export { pullRefused, pullStatus, type PullStatus } from './ingest/pull-status.js';
export { RecordQueue } from './ingest/record-queue.js';
export { ensureStreams, verifyMapping } from './ingest/streams.js';
export { ActivationLog, type Activation } from './control/activation-log.js';
export { WorkerMetrics } from './metrics/metrics.js';
export {
  GC_REPORT_MS,
  GcKind,
  GcPauseLog,
  watchGcPauses,
  type GcPause,
} from './metrics/gc-pauses.js';
export { PartitionRunner, type PartitionRunnerDeps } from './threads/partition-runner.js';
export { WorkerPool, type Logger } from './threads/worker-pool.js';
export { Publisher } from './output/publisher.js';
export {
  natsAlertSink,
  natsDeadLetterSink,
  type AlertSink,
  type DeadLetter,
  type DeadLetterSink,
} from './output/sinks.js';
