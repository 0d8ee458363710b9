/** Vigil's runtime: partitions on NATS JetStream, shard workers, control fan-out, alerts, health and metrics. */
export {
  DEFAULT_OPTIONS,
  ENV,
  natsConnection,
  resolveOptions,
  type VigilOptions,
} from './config.js';
export { ControlFollower, type ControlEvent } from './control-follower.js';
export { DEMO_CONTROL, followAlerts, publishDemoRules, startDemoProducer } from './demo.js';
export { ServiceError, ServiceErrorCode } from './errors.js';
export { storedAtMs, type EventSource, type LogRecord } from './event-source.js';
export { parseAckReply, type AckReplyInfo } from './ack-reply.js';
export { jetStreamPartitionSource } from './partition-consumer.js';
export { pullRefused, pullStatus, type PullStatus } from './pull-status.js';
export { RecordQueue } from './record-queue.js';
export { WorkerMetrics } from './metrics.js';
export { PartitionRunner, type PartitionRunnerDeps } from './partition-runner.js';
export { Publisher } from './publisher.js';
export {
  ensurePrometheusInstalled,
  ensureServersInstalled,
  findExecutable,
  freePort,
  natsAccounts,
  natsConfig,
  startNats,
  startRedis,
  type NatsUsers,
  type ServerHandle,
} from './servers.js';
export { type RouteHook } from './http.js';
export { startService, type RunningService, type ServiceHooks } from './service.js';
export {
  natsAlertSink,
  natsDeadLetterSink,
  type AlertSink,
  type DeadLetter,
  type DeadLetterSink,
} from './sinks.js';
export { ensureStreams, verifyMapping } from './streams.js';
export { ActivationLog, type Activation } from './activation-log.js';
export { GC_REPORT_MS, GcKind, GcPauseLog, watchGcPauses, type GcPause } from './gc-pauses.js';
export { stopOnSignals } from './stop-on-signals.js';
export { WorkerPool, type Logger } from './worker-pool.js';
