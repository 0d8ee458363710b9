/**
 * `npm run soak:keys -- [--keys N] [--rate R] [--every S] [--idle S]`: a soak of an ever-growing
 * key space, outside CI. One service process (from the sources, checkpoints on) runs windowed
 * threshold rules keyed by the partition key; every event has a key never seen before, so keyed
 * state only stays bounded if the service lets go of keys whose windows have passed. Prints a
 * sample line every `--every` seconds; the last line is one JSON object:
 * {"bench":"keys","keys":…,"rssPeakMb":…,"rssEndMb":…,…,"seconds":…}.
 */
import { createInbox, type Msg } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { ensureServersInstalled } from '../scripts/local-servers.js';
import { ServiceProcess } from '../test/integration/service-process.js';
import {
  eventually,
  metricSum,
  startTestServers,
  type TestServers,
} from '../test/integration/servers.js';
import { positiveArg } from './positive-arg.js';

const arg = positiveArg;

const keys = arg('keys', 2_000_000);
const rate = arg('rate', 20_000);
const everyMs = arg('every', 5) * 1000;
// Twice the 10 s window plus a margin: ticks move event time on the idle partitions meanwhile.
const idleMs = arg('idle', 30) * 1000;
const partitions = 4;
// Unacknowledged publishes allowed: enough to keep the rate over a loopback round trip, small
// enough that a server falling behind slows the producer instead of filling its buffer.
const WINDOW = 4000;
const MB = 1024 * 1024;

const threshold = (aggregate: string, field?: string) => ({
  kind: 'threshold',
  aggregate,
  ...(field === undefined ? {} : { field }),
  window: '10s',
  operator: '>=',
  value: 3,
});
// No `key` field: state is keyed by the partition key, so every event adds one keyed-state entry
// (holding the four rules' windows) that nothing but expiry will ever remove.
const RULES = [
  { id: 'keys-count', on: ['payment'], pattern: threshold('count') },
  { id: 'keys-sum', on: ['payment'], pattern: threshold('sum', 'amount') },
  { id: 'keys-max', on: ['payment'], pattern: threshold('max', 'amount') },
  {
    id: 'keys-suppressed',
    on: ['payment'],
    pattern: threshold('count'),
    alert: { severity: 'low', suppressFor: '10s' },
  },
];

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const log = (line: string): void => console.log(`soak:keys: ${line}`);
const fmt = (x: number): string => Math.round(x).toLocaleString('en-US');
const mb = (bytes: number): number => Math.round((bytes / MB) * 10) / 10;

// Everything started is reachable from here, so a failure or a signal at any point stops it all.
let serversStarting: Promise<TestServers> | undefined;
let service: ServiceProcess | undefined;
let redis: Redis | undefined;
let stopping: Promise<void> | undefined;
let interrupted = false;
const stopAll = (): Promise<void> =>
  (stopping ??= (async () => {
    redis?.disconnect();
    await service?.kill();
    // Servers still starting when a signal came are waited for, then stopped too.
    const servers = await serversStarting?.catch(() => undefined);
    await servers?.stop();
  })());
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.once(signal, () => {
    interrupted = true;
    log(`${signal}: stopping what it started`);
    void stopAll().finally(() => process.exit(130));
  });

type Sample = Record<'rss' | 'heap' | 'liveKeys' | 'stateKeys' | 'redis' | 'processed', number>;

/** One reading of the service's /metrics and of Redis INFO memory. */
async function sample(svc: ServiceProcess, client: Redis): Promise<Sample> {
  const res = await fetch(`${svc.url}/metrics`, { signal: AbortSignal.timeout(10_000) });
  const text = await res.text();
  const info = await client.info('memory');
  return {
    // Summed, so a process-wide gauge counts once whichever registries export it.
    rss: metricSum(text, 'process_resident_memory_bytes'),
    // The main thread's heap and the worker threads' (where keyed state lives).
    heap:
      metricSum(text, 'nodejs_heap_size_used_bytes') +
      metricSum(text, 'vigil_worker_heap_used_bytes'),
    liveKeys: metricSum(text, 'vigil_live_keys'),
    stateKeys: metricSum(text, 'vigil_state_keys'),
    redis: Number(/^used_memory:(\d+)/m.exec(info)?.[1] ?? NaN),
    processed: metricSum(text, 'vigil_events_total'),
  };
}

async function main(): Promise<void> {
  log(`${fmt(keys)} distinct keys at ${fmt(rate)}/s, a sample every ${everyMs / 1000} s`);
  ensureServersInstalled(log);
  serversStarting = startTestServers({ partitions, redis: true });
  const servers = await serversStarting;
  const svc = (service = new ServiceProcess(servers, partitions, {
    VIGIL_CHECKPOINT_INTERVAL_MS: '1000',
    // Ticks let idle partitions' event time pass the windows once the producer stops.
    VIGIL_TICK_INTERVAL_MS: '1000',
    VIGIL_OUT_OF_ORDER_MS: '1000',
  }));
  await svc.ready();
  const client = (redis = new Redis(servers.redis?.url ?? ''));

  // The service created the streams; the rules go in now, and the producer waits until every
  // partition has applied the last one, so each event is judged by all four.
  let seq = 0;
  for (const rule of RULES)
    seq = (await servers.js.publish('vigil.control', JSON.stringify({ op: 'upsert-rule', rule })))
      .seq;
  await eventually(
    async () => {
      const text = await (await fetch(`${svc.url}/metrics`)).text();
      const applied = text
        .split('\n')
        .filter((l) => l.startsWith('vigil_control_seq_applied{'))
        .map((l) => Number(l.slice(l.lastIndexOf(' ') + 1)));
      return applied.length === partitions && applied.every((s) => s >= seq);
    },
    20_000,
    'the rules to be applied on every partition',
  );

  const t0 = performance.now();
  const elapsed = (): number => (performance.now() - t0) / 1000;
  let sent = 0;
  let acked = 0;
  let ackError: string | undefined;
  const start = await sample(svc, client);
  let end = start;
  const peak = { ...start };
  const report = (s: Sample): void =>
    log(
      `${elapsed().toFixed(1)} s  keys ${fmt(sent)}  processed ${fmt(s.processed)}  rss ${mb(s.rss)} MB  heap ${mb(s.heap)} MB  liveKeys ${fmt(s.liveKeys)}  stateKeys ${fmt(s.stateKeys)}  redis ${mb(s.redis)} MB`,
    );
  report(start);
  const take = (s: Sample): void => {
    end = s;
    for (const k of ['rss', 'heap', 'liveKeys', 'stateKeys', 'redis'] as const)
      peak[k] = Math.max(peak[k], s[k]);
    report(s);
  };
  let sampling = true;
  const sampler = (async () => {
    for (let next = everyMs; sampling; next += everyMs) {
      await sleep(Math.max(0, next - elapsed() * 1000));
      if (!sampling) break;
      try {
        take(await sample(svc, client));
      } catch (e) {
        if (svc.child.exitCode !== null || svc.child.signalCode !== null)
          throw new Error(`the service exited:\n${svc.output.slice(-4000)}`);
        // A slow scrape under load is no reason to end a long soak.
        log(`sample failed: ${(e as Error).message}`);
      }
    }
  })();
  // A failing sampler ends the run at once, not after the producer.
  const samplerFailed = sampler.then(
    () => new Promise<never>(() => {}),
    (e: unknown) => Promise.reject(e),
  );
  // Handled here too: once the run is past its last race, a late failure must not crash the exit.
  samplerFailed.catch(() => {});

  // Core publish with a reply inbox: JetStream's acks arrive on one subscription, so the
  // producer keeps a bounded window in flight and knows every key was stored, without a promise
  // per event. Measured at --rate 20000 on two cores: this kept 19,961/s; core publish with a
  // flush every 5 ms 19,835/s, but unacknowledged; js.publish with 4,000 in flight 11,262/s.
  const inbox = createInbox();
  const acks = servers.nc.subscribe(inbox, {
    callback: (err: Error | null, m: Msg) => {
      acked++;
      if (err !== null) ackError ??= err.message;
      else if (m.headers?.hasError)
        ackError ??= `status ${m.headers.code} ${m.headers.description}`;
      else if (m.data[2] === 0x65 /* {"error" */) ackError ??= new TextDecoder().decode(m.data);
    },
  });
  const produce = async (): Promise<void> => {
    const tp = performance.now();
    while (sent < keys) {
      if (ackError !== undefined) throw new Error(`a publish to EVENTS failed: ${ackError}`);
      const due = Math.min(keys, Math.floor(((performance.now() - tp) * rate) / 1000));
      const room = acked + WINDOW;
      // Creation time, not a precomputed schedule: `ts` is when the event was made.
      for (const now = Date.now(); sent < due && sent < room; sent++)
        servers.nc.publish(
          `events.k${sent.toString(36)}`,
          `{"type":"payment","ts":${now},"amount":1}`,
          { reply: inbox },
        );
      // One socket write per turn of the event loop; the sleep lets acks and samples in.
      await sleep(sent < due ? 1 : 5);
    }
    await eventually(() => acked >= sent, 60_000, 'JetStream to acknowledge every event');
    if (ackError !== undefined) throw new Error(`a publish to EVENTS failed: ${ackError}`);
  };
  await Promise.race([produce(), samplerFailed]);
  acks.unsubscribe();
  const producerSeconds = elapsed();
  log(
    `producer done: ${fmt(sent)} keys in ${producerSeconds.toFixed(1)} s (${fmt(sent / producerSeconds)}/s), all acknowledged; idle for ${idleMs / 1000} s`,
  );
  await Promise.race([sleep(idleMs), samplerFailed]);
  // The last reading is taken here rather than by the sampler, which may be asleep mid-period.
  sampling = false;
  take(await sample(svc, client));
  console.log(
    JSON.stringify({
      bench: 'keys',
      keys: sent,
      rate: Math.round(sent / producerSeconds),
      rssStartMb: mb(start.rss),
      rssPeakMb: mb(peak.rss),
      rssEndMb: mb(end.rss),
      heapStartMb: mb(start.heap),
      heapPeakMb: mb(peak.heap),
      heapEndMb: mb(end.heap),
      liveKeysPeak: peak.liveKeys,
      liveKeysEnd: end.liveKeys,
      stateKeysPeak: peak.stateKeys,
      stateKeysEnd: end.stateKeys,
      redisStartMb: mb(start.redis),
      redisPeakMb: mb(peak.redis),
      redisEndMb: mb(end.redis),
      seconds: Math.round(elapsed() * 10) / 10,
    }),
  );
}

let code = 0;
try {
  await main();
} catch (e) {
  code = 1;
  // After a signal the closed connections make main fail: that is the stop, not a failure.
  if (!interrupted)
    console.error(`soak:keys: failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
} finally {
  await stopAll();
}
process.exit(code);
