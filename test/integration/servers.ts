import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import {
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import {
  resolveOptions,
  startService,
  type RunningService,
  type Logger,
  type VigilOptions,
} from '../../service/index.js';
import { startNats, startRedis, type ServerHandle } from '../../scripts/local-servers.js';
import { storedAtMs } from '../../protocol/index.js';
import type { Alert } from '../../rules/index.js';

/** Real servers for one test file: nats-server (and redis-server) on random ports, data in a temp folder. */
export interface TestServers {
  readonly nats: ServerHandle;
  readonly redis: ServerHandle | undefined;
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly dir: string;
  stop(): Promise<void>;
}

export async function startTestServers(opts: {
  partitions: number;
  redis?: boolean;
  /** nats-server's `max_payload`; default the one Vigil's configurations set. */
  natsMaxPayload?: string;
}): Promise<TestServers> {
  const dir = mkdtempSync(join(tmpdir(), 'vigil-test-'));
  const nats = await startNats({
    dataDir: join(dir, 'nats'),
    partitions: opts.partitions,
    ...(opts.natsMaxPayload === undefined ? {} : { maxPayload: opts.natsMaxPayload }),
  });
  const redis = opts.redis ? await startRedis({ dataDir: join(dir, 'redis') }) : undefined;
  const nc = await connect({ servers: nats.url });
  return {
    nats,
    redis,
    nc,
    js: jetstream(nc),
    jsm: await jetstreamManager(nc),
    dir,
    async stop() {
      await nc.close();
      await nats.stop();
      await redis?.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Starts the service in this process (its workers are real threads), ignoring the environment. */
export async function startTestService(
  servers: TestServers,
  overrides: Partial<Omit<VigilOptions, 'limits'>> = {},
  log: Logger = (level, message) =>
    level !== 'info' && console.log(`[service ${level}] ${message}`),
): Promise<{ service: RunningService; options: VigilOptions }> {
  const options = resolveOptions(
    {
      natsUrl: servers.nats.url,
      // Without a redis-server, checkpoints are off.
      ...(servers.redis ? { redisUrl: servers.redis.url } : { checkpointIntervalMs: 0 }),
      httpPort: 0,
      workers: 2,
      tickIntervalMs: 200,
      ...overrides,
    },
    {},
  );
  const service = await startService(options, log);
  await service.whenReady();
  return { service, options };
}

/** Sums a counter of a Prometheus exposition, optionally for one label value. */
export function metricSum(text: string, name: string, label?: [string, string]): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== '{' && rest[0] !== ' ') continue;
    if (label && !rest.includes(`${label[0]}="${label[1]}"`)) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** Polls until `check` returns true. */
export async function eventually(
  check: () => Promise<boolean> | boolean,
  timeoutMs = 20_000,
  what = 'condition',
): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A per-partition gauge of a service's `/metrics`, partition by partition (undefined: not exported). */
export async function partitionGauge(
  service: { readonly url: string },
  name: string,
  partitions: number,
): Promise<(number | undefined)[]> {
  const lines = (await (await fetch(`${service.url}/metrics`)).text()).split('\n');
  return Array.from({ length: partitions }, (_, p) => {
    const line = lines.find((l) => l.startsWith(`${name}{partition="${p}"}`));
    return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
  });
}

/** Waits until every partition has applied control sequence `seq` (its marker has been read). */
export async function activated(
  service: { readonly url: string },
  seq: number,
  partitions: number,
  timeoutMs = 10_000,
): Promise<void> {
  await eventually(
    async () =>
      (await partitionGauge(service, 'vigil_control_seq_applied', partitions)).every(
        (applied) => applied !== undefined && applied >= seq,
      ),
    timeoutMs,
    `control sequence ${seq} to be applied on every partition`,
  );
}

/**
 * Publishes `rules` as one `replace-all` on CONTROL and waits until every partition has applied
 * it; returns its control sequence.
 */
export async function replaceRules(
  servers: TestServers,
  service: RunningService,
  partitions: number,
  rules: readonly unknown[],
): Promise<number> {
  return publishControl(servers, service, partitions, { op: 'replace-all', rules });
}

/** Publishes a control message and waits until every partition has it in force; its sequence. */
export async function publishControl(
  servers: TestServers,
  service: { readonly url: string },
  partitions: number,
  message: unknown,
): Promise<number> {
  const { seq } = await servers.js.publish('vigil.control', JSON.stringify(message));
  await activated(service, seq, partitions);
  return seq;
}

/**
 * Waits until the service has read every record of EVENTS and of REKEY (each record counts once
 * in vigil_events_total), REKEY having stopped growing (what the partitions sent last may still
 * be on its way when EVENTS is read).
 */
export async function drained(
  servers: TestServers,
  service: { readonly url: string },
  timeoutMs = 30_000,
): Promise<void> {
  let lastRekey = -1;
  await eventually(
    async () => {
      const text = await (await fetch(`${service.url}/metrics`)).text();
      const events = (await servers.jsm.streams.info('EVENTS')).state.messages;
      const rekey =
        (await servers.jsm.streams.info('REKEY').catch(() => undefined))?.state.messages ?? 0;
      const steady = rekey === lastRekey;
      lastRekey = rekey;
      return metricSum(text, 'vigil_events_total') >= events + rekey && (rekey === 0 || steady);
    },
    timeoutMs,
    'the service to read all of EVENTS and REKEY',
  );
}

/** A message of a stream as the tests read it. */
export interface StoredRecord {
  readonly seq: number;
  readonly subject: string;
  readonly data: Uint8Array;
  readonly storedAt: number;
  readonly headers: Record<string, string>;
}

/** Every message of a stream, in order. */
export async function readStream(servers: TestServers, stream: string): Promise<StoredRecord[]> {
  const info = await servers.jsm.streams.info(stream);
  const out: StoredRecord[] = [];
  if (info.state.messages === 0) return out;
  const consumer = await servers.js.consumers.get(stream);
  const messages = await consumer.consume();
  for await (const m of messages) {
    const headers: Record<string, string> = {};
    for (const [k, v] of m.headers ?? []) headers[k] = v.join(',');
    out.push({
      seq: m.seq,
      subject: m.subject,
      data: m.data,
      storedAt: storedAtMs(m.info),
      headers,
    });
    if (m.info.pending === 0) break;
  }
  await messages.close();
  return out;
}

/** Every alert in `ALERTS`, in order. */
export async function readAlerts(servers: TestServers): Promise<Alert[]> {
  const decoder = new TextDecoder();
  const records = await readStream(servers, 'ALERTS');
  return records.map((m) => JSON.parse(decoder.decode(m.data)) as Alert);
}
