import { connect, type NatsConnection } from '@nats-io/transport-node';
import {
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { natsConnection } from '../../jetstream/index.js';
import type { VigilOptions } from '../config.js';
import { watchConnection } from '../ingest/connection-watch.js';

/** A worker's connection to NATS, its JetStream clients, and the function that stops reporting on it. */
export interface WorkerNats {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly unwatch: () => void;
}

/**
 * Connects worker `index` to NATS (reconnecting for ever) and reports the connection's losses and
 * returns: `onChange(connected)` and one log line each.
 */
export async function connectWorker(
  index: number,
  o: VigilOptions,
  log: (level: 'info' | 'warn', message: string) => void,
  onChange: (connected: boolean) => void,
): Promise<WorkerNats> {
  const nc = await connect({
    ...natsConnection(o),
    name: `vigil-worker-${index}`,
    noAsyncTraces: true,
    maxReconnectAttempts: -1,
  });
  // Readiness means judging events now: a worker without NATS judges nothing. Each change is
  // logged once, where the failures it causes (ticks, markers, pulls) would repeat.
  const unwatch = watchConnection(nc, (e) => {
    if (e === 'closed') return;
    const connected = e === 'reconnect';
    log(
      connected ? 'info' : 'warn',
      connected ? 'NATS reconnected' : 'NATS disconnected; judging nothing until it is back',
    );
    onChange(connected);
  });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  return { nc, js, jsm, unwatch };
}
