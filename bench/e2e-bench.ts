/**
 * End-to-end benchmark: the service on a real nats-server against the bare JetStream ceiling.
 *
 *   node --import tsx bench/e2e-bench.ts              500,000 events over 100,000 keys, P = 16
 *   node --import tsx bench/e2e-bench.ts --quick      smoke run: 50,000 events
 *   node --import tsx bench/e2e-bench.ts --events N   N events (also --keys N, --rules N, --seed N, --workers N,
 *                                                    --changes N: rule changes timed in (c), default 40)
 *   node --import tsx bench/e2e-bench.ts --checkpoint-ms 0   no checkpoints, no redis-server
 *   node --import tsx bench/e2e-bench.ts --young-generation-mb N   workers' young generation (default: the service's)
 *   node --import tsx bench/e2e-bench.ts --out-of-order-ms N   the service's outOfOrderMs (default: the service's)
 *   node --import tsx bench/e2e-bench.ts --load-percent N   (c)'s load, percent of the capacity the ramp finds (default 50)
 *   node --import tsx bench/e2e-bench.ts --rekeyed N   N% of the threshold rules keyed by `merchant`, through the
 *                                                    re-keying hop (VIGIL_REKEY=on, partition key `cardId`; default 0: hop off)
 *   node --import tsx bench/e2e-bench.ts --only-checkpoint-compare   steps 0-3 (b0) only: `bench:checkpoint` runs this
 *
 * Steps, all in one run (see bench/README.md for what each figure means):
 *  0. nats-server (and redis-server for the service's checkpoints) in a temp folder; 1,000 rules
 *     published to `vigil.control` as one `replace-all`;
 *     a first, short service run writes their epoch markers at the head of every partition.
 *  1. EVENTS is filled with N events (~200 bytes) published to `events.<key>` (core publish, one
 *     reply inbox for the JetStream acks, a window of acks in flight).
 *  2. (a) ceiling: 16 bare ordered consumers, one per partition, drain the stream.
 *  3. (b0) with checkpoints on, `checkpointThroughputRatio`: a second nats-server gets the same
 *     rules and events, and a service with checkpoints and one without drain their logs side by
 *     side, sharing the cores, until the first is done (`--no-checkpoint-compare` skips it).
 *     (b) the service (W = cores workers) drains the stream alone with the rules in force, and
 *     stays running for (c).
 *  4. (c) activation latency of rule changes while a producer keeps the service at ~50% load:
 *     of its capacity with that producer on the same cores, found by stepping the rate up first.
 *
 * Progress goes to stdout; the last line of output is one JSON object with every figure (with an
 * `error` field, and exit code 1, when the run fails part-way). Everything started is stopped.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { Redis } from 'ioredis';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';
import { connect, createInbox, type Msg, type NatsConnection } from '@nats-io/transport-node';
import {
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import type { Rule } from '../rules/index.js';
import { eventGenerator, generateRules } from './e2e-inputs.js';
import { round } from './round.js';
import {
  DEFAULT_OPTIONS,
  ensureStreams,
  resolveOptions,
  GC_REPORT_MS,
  verifyMapping,
  type Logger,
  type RunningService,
  type VigilOptions,
} from '../service/index.js';
import {
  ensureServersInstalled,
  startNats,
  startRedis,
  type ServerHandle,
} from '../scripts/local-servers.js';
import { CONTROL_SUBJECT, eventSubject, partitionFilter, Streams } from '../protocol/index.js';

/**
 * The service runs as `npm start` and the image run it: compiled to dist/ (scripts/build.mjs).
 * Started from the TypeScript sources, each worker thread would compile its modules through tsx
 * first (~0.3 s of the start-up that (b) counts), which production never does.
 */
function compiledService(): Promise<typeof import('../service/index.js')> {
  const root = resolve(import.meta.dirname, '..');
  const built = spawnSync(process.execPath, ['scripts/build.mjs', '--quiet'], {
    cwd: root,
    stdio: 'inherit',
  });
  if (built.status !== 0) throw new Error('scripts/build.mjs failed: see its output above');
  return import(pathToFileURL(join(root, 'dist/service/index.js')).href) as Promise<
    typeof import('../service/index.js')
  >;
}
const { startService } = await compiledService();

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

const argv = process.argv.slice(2);

function numberArg(name: string, fallback: number): number {
  const i = argv.findIndex((a) => a === `--${name}` || a.startsWith(`--${name}=`));
  if (i < 0) return fallback;
  const arg = argv[i] as string;
  const raw = arg.includes('=') ? arg.slice(arg.indexOf('=') + 1) : argv[i + 1];
  const n = Number(raw);
  if (raw === undefined || !Number.isSafeInteger(n) || n < 0)
    throw new Error(`--${name} needs a non-negative integer, got ${JSON.stringify(raw)}`);
  return n;
}

const QUICK = argv.includes('--quick');
/** Stop after (b0): what `bench:checkpoint` runs for its `checkpointThroughputRatio`. */
const ONLY_COMPARE = argv.includes('--only-checkpoint-compare');
const EVENTS = numberArg('events', QUICK ? 50_000 : 500_000);
const KEYS = numberArg('keys', 100_000);
const RULES = numberArg('rules', 1000);
const SEED = numberArg('seed', 20261129) >>> 0;
const PARTITIONS = 16;
const WORKERS = numberArg('workers', Math.max(1, availableParallelism()));
/** The workers' young generation (`workerYoungGenerationMb`): throughput against pause length. */
const YOUNG_GENERATION_MB = numberArg(
  'young-generation-mb',
  DEFAULT_OPTIONS.workerYoungGenerationMb,
);
/** JetStream acks awaited at once while filling EVENTS. */
const FILL_WINDOW = 2000;
/** Control messages of the activation measurement, and the time between them. */
const CONTROLS = numberArg('changes', QUICK ? 20 : 40);
const CONTROL_SPACING_MS = 250;
/**
 * Share of the service's capacity (with a producer beside it, see (c)'s ramp) the producer keeps
 * up during (c); `--load-percent N` sets another (the target is judged at the default, 50).
 */
const LOAD_PERCENT = numberArg('load-percent', 50);
/** Percent of the threshold rules keyed by another field than the partition key (through the hop). */
const REKEYED = numberArg('rekeyed', 0);
if (REKEYED < 0 || REKEYED > 100) throw new Error(`--rekeyed needs 0 to 100, got ${REKEYED}`);
if (LOAD_PERCENT < 1 || LOAD_PERCENT > 100)
  throw new Error(`--load-percent needs 1 to 100, got ${LOAD_PERCENT}`);
const LOAD_SHARE = LOAD_PERCENT / 100;
/** How long each rate of (c)'s ramp runs (the ramp finds the capacity with a producer beside the service). */
const RAMP_STEP_MS = QUICK ? 1500 : 3000;
/** After a step, the time the service has to read the records of the step (the rest counts as not kept up with). */
const RAMP_GRACE_MS = 300;
/**
 * How often the pool's activation log is read while waiting for an activation. It lives in the
 * service's main thread (workers report each marker they apply), so reading it costs the workers
 * nothing, unlike /metrics (~15 ms of worker CPU per read with 1,000 rules).
 */
const ACTIVATION_POLL_MS = 5;
/**
 * A slow change is shown with its workers' GC pauses from this long before it was published: a
 * pause just before leaves a backlog that the marker then waits behind.
 */
const GC_LEAD_MS = 250;
/** A change not applied on every partition by then counts as taking this long, and (c) ends. */
const ACTIVATION_TIMEOUT_MS = 30_000;
/** No new change after (c) has run this long (an overloaded service makes each change slow). */
const ACTIVATION_BUDGET_MS = Math.max(QUICK ? 30_000 : 60_000, CONTROLS * CONTROL_SPACING_MS * 1.5);
/** Checkpoint interval of the service (its default); 0 turns checkpoints and Redis off. */
const CHECKPOINT_MS = numberArg('checkpoint-ms', DEFAULT_OPTIONS.checkpointIntervalMs);
/** The service's `outOfOrderMs`: how long events wait in each partition's reorder buffer. */
const OUT_OF_ORDER_MS = numberArg('out-of-order-ms', DEFAULT_OPTIONS.outOfOrderMs);
/**
 * Bounds on the drain, so a stuck service fails the run instead of hanging it: a total, and a
 * longest time without progress (records read, as the best reading so far).
 */
const DRAIN_TIMEOUT_MS = Math.max(60_000, EVENTS * 0.4);
const DRAIN_STALL_MS = 60_000;

if (EVENTS < 1 || KEYS < 1 || RULES < 20 || CONTROLS < 1)
  throw new Error('--events, --keys and --changes must be at least 1, --rules at least 20');

const log = (line: string): void => console.log(`[e2e-bench] ${line}`);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const fmt = (x: number): string => Math.round(x).toLocaleString('en-US');

// ---------------------------------------------------------------------------------------------
// Publishing: core publish to events.<key>, JetStream acks on one inbox, a window in flight
// ---------------------------------------------------------------------------------------------

/**
 * Publishes with core NATS and a reply subject, so JetStream sends its ack there; counts acks and
 * keeps at most `window` unacknowledged. Any error ack (or "no responders": the subject reaches no
 * stream) fails the run, so every acknowledged publish is a message in EVENTS.
 */
class AckPipeline {
  private readonly inbox = createInbox();
  private sent = 0;
  private acked = 0;
  private error: string | undefined;
  private wake: (() => void) | undefined;
  private readonly sub;

  constructor(
    private readonly nc: NatsConnection,
    private readonly window: number,
  ) {
    this.sub = nc.subscribe(this.inbox, { callback: (err, m) => this.onAck(err, m) });
  }

  get published(): number {
    return this.sent;
  }

  get acknowledged(): number {
    return this.acked;
  }

  private onAck(err: Error | null, m: Msg): void {
    this.acked++;
    if (err !== null) this.error ??= err.message;
    else if (m.headers?.hasError || m.headers?.code === 503)
      this.error ??= `status ${m.headers.code} ${m.headers.description} (does the subject reach a stream?)`;
    else if (m.data.length > 0 && m.data[2] === 0x65 /* {"error" */)
      this.error ??= new TextDecoder().decode(m.data);
    if (this.wake !== undefined && this.sent - this.acked <= this.window / 2) {
      const w = this.wake;
      this.wake = undefined;
      w();
    }
  }

  /**
   * Publishes now when there is room in the window (no promise), else once there is. Callers
   * await only a returned promise: the client writes what was published in one turn of the
   * event loop as one socket write, where an await per publish made a write (a syscall) per event,
   * CPU the bench then took from the service on the same cores.
   */
  publish(subject: string, data: Uint8Array): Promise<void> | undefined {
    if (this.error !== undefined) throw new Error(`a JetStream publish failed: ${this.error}`);
    if (this.sent - this.acked >= this.window)
      return new Promise<void>((r) => (this.wake = r)).then(() => this.publish(subject, data));
    this.nc.publish(subject, data, { reply: this.inbox });
    this.sent++;
    return undefined;
  }

  /** Waits until every publish is acknowledged; throws on the first error ack. */
  async drain(timeoutMs = 60_000): Promise<void> {
    const until = Date.now() + timeoutMs;
    while (this.acked < this.sent) {
      if (Date.now() > until)
        throw new Error(`${this.sent - this.acked} publishes unacknowledged after ${timeoutMs} ms`);
      await sleep(5);
    }
    if (this.error !== undefined) throw new Error(`a JetStream publish failed: ${this.error}`);
  }

  close(): void {
    this.sub.unsubscribe();
  }
}

// ---------------------------------------------------------------------------------------------
// Metrics of the service
// ---------------------------------------------------------------------------------------------

interface Metric {
  readonly name: string;
  readonly labels: string;
  readonly value: number;
}

function parseMetrics(text: string): Metric[] {
  const out: Metric[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    const head = line.slice(0, sp);
    const brace = head.indexOf('{');
    out.push({
      name: brace < 0 ? head : head.slice(0, brace),
      labels: brace < 0 ? '' : head.slice(brace),
      value: Number(line.slice(sp + 1)),
    });
  }
  return out;
}

async function readMetrics(service: RunningService): Promise<Metric[]> {
  const res = await fetch(`${service.url}/metrics`);
  if (!res.ok) throw new Error(`GET /metrics answered ${res.status}`);
  return parseMetrics(await res.text());
}

const sumOf = (ms: readonly Metric[], name: string, labelPart = ''): number =>
  ms.reduce((s, m) => (m.name === name && m.labels.includes(labelPart) ? s + m.value : s), 0);

/** Records of `EVENTS` read: `vigil_events_total` less the key spaces' partitions' (`<p>~<space>`, records of `REKEY`). */
const eventLogRecords = (ms: readonly Metric[]): number =>
  ms.reduce(
    (s, m) =>
      m.name === 'vigil_events_total' && !/partition="\d+~/.test(m.labels) ? s + m.value : s,
    0,
  );

/** The lowest `vigil_control_seq_applied` over the partitions (0 when one has not reported yet). */
function minApplied(ms: readonly Metric[]): number {
  const byPartition = new Map<string, number>();
  for (const m of ms)
    if (m.name === 'vigil_control_seq_applied') byPartition.set(m.labels, m.value);
  return byPartition.size < PARTITIONS ? 0 : Math.min(...byPartition.values());
}

/** Partitions present in the exposition (a worker that does not answer within 5 s is left out). */
function partitionsReporting(ms: readonly Metric[]): number {
  return ms.filter((m) => m.name === 'vigil_control_seq_applied').length;
}

/** Cumulative buckets of a histogram: upper bound (s) → count. */
/** A histogram's cumulative buckets (upper bound → count), summed over the series whose labels include `having`. */
function buckets(ms: readonly Metric[], name: string, having = ''): Map<number, number> {
  const out = new Map<number, number>();
  for (const m of ms) {
    if (m.name !== `${name}_bucket` || !m.labels.includes(having)) continue;
    const le = /le="([^"]+)"/.exec(m.labels)?.[1];
    if (le === undefined) continue;
    const bound = le === '+Inf' ? Infinity : Number(le);
    out.set(bound, (out.get(bound) ?? 0) + m.value);
  }
  return out;
}

/** A quantile of the observations between two snapshots of a histogram, interpolated in its bucket (ms). */
function histogramQuantileMs(
  before: Map<number, number>,
  after: Map<number, number>,
  q: number,
): number | null {
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const total = (after.get(Infinity) ?? 0) - (before.get(Infinity) ?? 0);
  if (total <= 0) return null;
  const rank = q * total;
  let prevBound = 0;
  let prevCount = 0;
  for (const b of bounds) {
    const c = (after.get(b) ?? 0) - (before.get(b) ?? 0);
    if (c >= rank) {
      if (!Number.isFinite(b)) return prevBound * 1000;
      const share = c === prevCount ? 1 : (rank - prevCount) / (c - prevCount);
      return (prevBound + (b - prevBound) * share) * 1000;
    }
    prevBound = b;
    prevCount = c;
  }
  return null;
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i] as number;
}

async function waitFor(
  check: () => Promise<boolean>,
  timeoutMs: number,
  what: string,
  pollMs: () => number,
): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(pollMs());
  }
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

/** Everything the run started, stopped in reverse order even when it fails. */
const cleanups: { what: string; run: () => Promise<void> | void }[] = [];
let cleaning: Promise<void> | undefined;

function onCleanup(what: string, run: () => Promise<void> | void): void {
  cleanups.push({ what, run });
}

function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    while (cleanups.length > 0) {
      const { what, run } = cleanups.pop() as (typeof cleanups)[number];
      const t = performance.now();
      try {
        await run();
      } catch (e) {
        console.error(`[e2e-bench] cleanup (${what}): ${(e as Error).message}`);
      }
      const s = (performance.now() - t) / 1000;
      if (s > 2) log(`stopping ${what} took ${s.toFixed(1)} s`);
    }
  })();
  return cleaning;
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    log(`${signal}: stopping everything`);
    void cleanup().finally(() => process.exit(130));
  });
}

const serviceLog: Logger = (level, message) => {
  if (level !== 'info') console.error(`[vigil ${level}] ${message}`);
};

/** Starts the service and registers its stop; the returned `stop` may be called earlier. */
async function startTracked(options: VigilOptions): Promise<RunningService> {
  const service = await startService(options, serviceLog);
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => (stopped ??= service.stop());
  onCleanup('the service', stop);
  return { ...service, stop };
}

async function flushRedis(url: string): Promise<void> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await client.connect();
    await client.flushall();
  } finally {
    client.disconnect();
  }
}

async function fill(
  nc: NatsConnection,
  next: (i: number) => { key: string; data: Uint8Array },
  n: number,
): Promise<{ seconds: number; bytes: number }> {
  const pipe = new AckPipeline(nc, FILL_WINDOW);
  const t0 = performance.now();
  let bytes = 0;
  let lastReport = t0;
  try {
    for (let i = 0; i < n; i++) {
      const e = next(i);
      bytes += e.data.byteLength;
      const room = pipe.publish(eventSubject(e.key), e.data);
      if (room !== undefined) await room;
      if ((i & 0xffff) === 0 && performance.now() - lastReport > 2000) {
        lastReport = performance.now();
        log(`  … ${fmt(i)} published (${fmt(i / ((lastReport - t0) / 1000))}/s)`);
      }
    }
    await pipe.drain();
  } finally {
    pipe.close();
  }
  return { seconds: (performance.now() - t0) / 1000, bytes };
}

/**
 * Readies one nats-server's log for draining: streams and mapping, the rules as one replace-all,
 * their markers at the head of every partition, then `EVENTS` filled with the run's events. A
 * change takes effect at its marker, and a service that was not running when the
 * change was committed writes the marker when it starts, after whatever `EVENTS` holds by then:
 * events filled before that would be judged by the empty rule set, so a first service run writes
 * the markers first. Its time to ready is the service's start-up cost (threads, CONTROL
 * catch-up, checkpoint lookup, consumers) on a log with nothing to drain. Redis is flushed after
 * it, so a drain reads the whole log rather than resuming from that run's checkpoint.
 */
async function prepareLog(
  nats: ServerHandle,
  options: VigilOptions,
  redis: ServerHandle | undefined,
  rules: readonly Rule[],
  what: string,
): Promise<{
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  next: (i: number) => { key: string; data: Uint8Array };
  rulesSeq: number;
  records: number;
  startupSeconds: number;
  fillSeconds: number;
  bytes: number;
}> {
  const nc = await connect({ servers: nats.url, name: 'e2e-bench', noAsyncTraces: true });
  onCleanup(`the NATS connection to ${what}`, () => nc.close());
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  await ensureStreams(jsm, options.duplicateWindowMs, PARTITIONS);
  await verifyMapping(nc, PARTITIONS);
  const controlBody = JSON.stringify({ op: 'replace-all', rules, meta: { actor: 'e2e-bench' } });
  const { seq: rulesSeq } = await js.publish(CONTROL_SUBJECT, controlBody);
  log(
    `${what}: published ${RULES} rules (${rules.filter((r) => r.pattern !== undefined).length} threshold rules) as one replace-all (${fmt(controlBody.length)} bytes, CONTROL seq ${rulesSeq})`,
  );
  const seedStart = performance.now();
  const seeder = await startTracked(options);
  await seeder.whenReady();
  const startupSeconds = (performance.now() - seedStart) / 1000;
  await waitFor(
    async () => minApplied(await readMetrics(seeder)) >= rulesSeq,
    60_000,
    'the rules to be applied on every partition',
    () => 50,
  );
  await seeder.stop();
  if (redis) await flushRedis(redis.url);
  log(
    `${what}: a first service run (ready after ${startupSeconds.toFixed(2)} s) wrote the epoch markers of seq ${rulesSeq} into the ${PARTITIONS} partitions (${((performance.now() - seedStart) / 1000).toFixed(1)} s in all)`,
  );
  const before = (await jsm.streams.info(Streams.events)).state.messages;
  // (c)'s producers go on with the same generator after the fill.
  const next = eventGenerator(SEED, KEYS);
  const filled = await fill(nc, next, EVENTS);
  const records = (await jsm.streams.info(Streams.events)).state.messages;
  if (records - before !== EVENTS)
    throw new Error(`${what}: EVENTS grew by ${records - before} messages, expected ${EVENTS}`);
  log(
    `${what}: filled EVENTS: ${fmt(EVENTS)} events (avg ${(filled.bytes / EVENTS).toFixed(0)} bytes) in ${filled.seconds.toFixed(2)} s = ${fmt(EVENTS / filled.seconds)}/s; ${fmt(records)} records in the stream`,
  );
  return {
    nc,
    js,
    jsm,
    next,
    rulesSeq,
    records,
    startupSeconds,
    fillSeconds: filled.seconds,
    bytes: filled.bytes,
  };
}

/**
 * When to read `/metrics` next during a drain that has read `share` of its log in `elapsedMs`:
 * a tenth of the time it still needs at its rate so far, between 50 ms and 1 s. Each read costs
 * the workers ~15 ms of CPU with 1,000 rules, so reads are rare but for the end.
 */
function drainPollMs(share: number, elapsedMs: number): number {
  if (share <= 0) return 1000;
  return Math.min(1000, Math.max(50, ((1 - share) / share) * elapsedMs * 0.1));
}

/**
 * The cost of checkpoints, side by side: a service with checkpoints and one without start at the
 * same moment, each on its own nats-server holding the same log, and share the cores until the
 * first has read all of it. The ratio of their shares read by then is the ratio of their rates
 * over the same seconds of the same machine, so the host's drift (up to 2× within minutes here)
 * weighs on both alike. redis-server's CPU comes out of both halves, where alone it would come out
 * of the one with checkpoints only: the caller reports it beside the ratio.
 */
async function drainSideBySide(
  withCheckpoints: { readonly options: VigilOptions; readonly jsm: JetStreamManager },
  without: { readonly options: VigilOptions; readonly jsm: JetStreamManager },
): Promise<{ seconds: number; onShare: number; offShare: number; records: number }> {
  const t0 = performance.now();
  const [on, off] = await Promise.all([
    startTracked(withCheckpoints.options),
    startTracked(without.options),
  ]);
  try {
    // The start-up probe of the mapping adds one record to each log.
    const [onTarget = 0, offTarget = 0] = await Promise.all(
      [withCheckpoints.jsm, without.jsm].map(
        async (m) => (await m.streams.info(Streams.events)).state.messages,
      ),
    );
    let last = { on: 0, off: 0, t: t0 };
    let best = { n: 0, t: t0 };
    let pollMs = 1000;
    await waitFor(
      async () => {
        // Both read at the same moment; a reading that misses a partition is not used.
        const [a, b] = await Promise.all([readMetrics(on), readMetrics(off)]);
        const t = performance.now();
        if (partitionsReporting(a) < PARTITIONS || partitionsReporting(b) < PARTITIONS)
          return false;
        const n = { on: sumOf(a, 'vigil_events_total'), off: sumOf(b, 'vigil_events_total') };
        if (n.on + n.off > best.n) best = { n: n.on + n.off, t };
        else if (t - best.t > DRAIN_STALL_MS)
          throw new Error(`neither service read a record in ${DRAIN_STALL_MS / 1000} s`);
        last = { ...n, t };
        if (n.on >= onTarget || n.off >= offTarget) return true;
        pollMs = drainPollMs(Math.max(n.on / onTarget, n.off / offTarget), t - t0);
        return false;
      },
      DRAIN_TIMEOUT_MS,
      'one of the two services to read all of its EVENTS',
      () => pollMs,
    );
    return {
      seconds: (last.t - t0) / 1000,
      onShare: Math.min(1, last.on / onTarget),
      offShare: Math.min(1, last.off / offTarget),
      records: last.on + last.off,
    };
  } finally {
    await Promise.all([on.stop(), off.stop()]);
  }
}

/** (a) Bare ordered consumers, one per partition, count records until each has none pending. */
async function drainCeiling(js: JetStreamClient): Promise<{ records: number; seconds: number }> {
  const t0 = performance.now();
  const counts = await Promise.all(
    Array.from({ length: PARTITIONS }, async (_, p) => {
      const consumer = await js.consumers.get(Streams.events, {
        filter_subjects: partitionFilter(p),
        deliver_policy: DeliverPolicy.All,
      });
      const messages = await consumer.consume({ max_messages: 2000 });
      let n = 0;
      for await (const m of messages) {
        n++;
        if (m.info.pending === 0) break;
      }
      await messages.close();
      return n;
    }),
  );
  return { records: counts.reduce((a, b) => a + b, 0), seconds: (performance.now() - t0) / 1000 };
}

/**
 * How many threads this machine runs at full speed at once: the same busy loop in one thread, then
 * in two at once. A shared or throttled machine may report 2 cores and run two threads at half
 * speed each; every rate below is then bounded by about one core's worth of work.
 */
async function cpuScaling(): Promise<{
  oneThreadMs: number;
  twoThreadsMs: number;
  effectiveCores: number;
}> {
  const spin = (): Promise<number> =>
    new Promise((resolve, reject) => {
      const w = new Worker(
        `const { parentPort } = require('node:worker_threads');
         const t = performance.now(); let x = 0;
         for (let i = 0; i < 4e8; i++) x = (x + i * 7) | 0;
         parentPort.postMessage([performance.now() - t, x]);`,
        { eval: true },
      );
      w.once('message', (m: [number, number]) => resolve(m[0]));
      w.once('error', reject);
    });
  const one = await spin();
  const two = Math.max(...(await Promise.all([spin(), spin()])));
  return {
    oneThreadMs: Math.round(one),
    twoThreadsMs: Math.round(two),
    effectiveCores: round((2 * one) / two, 2),
  };
}

/** CPU seconds used so far by a process: this one (all its threads, the service's workers included) or a server. */
function cpuSeconds(pid?: number): number {
  if (pid === undefined) {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1e6;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime, fields 14 and 15, in clock ticks (100 per second on Linux).
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
}

/**
 * Where the machine's CPU goes during a phase: microseconds per record read, for this process
 * (bench and service), nats-server and redis-server. On 2 cores they share, these say which one
 * the records wait for.
 */
function cpuMeter(
  servers: readonly ((Pick<ServerHandle, 'process'> & { readonly name: string }) | undefined)[],
): () => Record<string, number> {
  const sample = (): number[] => [
    cpuSeconds(),
    ...servers.map((s) => (s?.process.pid === undefined ? NaN : cpuSeconds(s.process.pid))),
  ];
  const start = sample();
  return () => {
    const end = sample();
    const names = ['benchAndService', ...servers.map((s) => s?.name ?? 'none')];
    const out: Record<string, number> = {};
    end.forEach((v, i) => {
      if (!Number.isNaN(v) && names[i] !== 'none')
        out[names[i] as string] = round(v - (start[i] as number), 2);
    });
    return out;
  };
}

/** CPU seconds of a phase as microseconds per record. */
function perRecord(cpu: Record<string, number>, records: number): Record<string, number> {
  return Object.fromEntries(
    Object.entries(cpu).map(([k, v]) => [k, round((v * 1e6) / Math.max(1, records), 1)]),
  );
}

/** A producer publishing at a steady rate until stopped; events from the same generator. */
function steadyProducer(
  nc: NatsConnection,
  next: (i: number) => { key: string; data: Uint8Array },
  firstIndex: number,
  ratePerSec: number,
): { stop(): Promise<{ published: number; seconds: number }> } {
  const pipe = new AckPipeline(nc, 1000);
  let running = true;
  const t0 = performance.now();
  const loop = (async () => {
    let i = 0;
    while (running) {
      const due = Math.floor(((performance.now() - t0) / 1000) * ratePerSec);
      while (i < due && running) {
        const e = next(firstIndex + i++);
        const room = pipe.publish(eventSubject(e.key), e.data);
        if (room !== undefined) await room;
      }
      await sleep(2);
    }
    await pipe.drain();
  })();
  return {
    async stop() {
      // The time it published for, not counting the wait for the last acks.
      const seconds = (performance.now() - t0) / 1000;
      running = false;
      try {
        await loop;
      } finally {
        pipe.close();
      }
      return { published: pipe.published, seconds };
    },
  };
}

/** Every figure of the run; printed as the last line, also when the run fails part-way. */
const result: Record<string, unknown> = {
  bench: 'e2e',
  quick: QUICK,
  events: EVENTS,
  keys: KEYS,
  rules: RULES,
  partitions: PARTITIONS,
  workers: WORKERS,
  workerYoungGenerationMb: YOUNG_GENERATION_MB,
  checkpointIntervalMs: CHECKPOINT_MS,
  outOfOrderMs: OUT_OF_ORDER_MS,
  rekeyedPercent: REKEYED,
  seed: SEED,
  /** The machine may be shared: its 1-minute load average when the run starts. */
  loadAverageAtStart: round(loadavg()[0] ?? 0, 2),
};

async function main(): Promise<void> {
  const runStart = performance.now();
  log(
    `${fmt(EVENTS)} events over ${fmt(KEYS)} keys, ${RULES} rules, P=${PARTITIONS}, W=${WORKERS} workers, checkpoints ${CHECKPOINT_MS > 0 ? `every ${CHECKPOINT_MS} ms` : 'off'}${QUICK ? ' (quick)' : ''}`,
  );

  const scaling = await cpuScaling();
  result.cpuScaling = scaling;
  log(
    `CPU: a busy loop took ${scaling.oneThreadMs} ms in one thread, ${scaling.twoThreadsMs} ms in two at once: ${scaling.effectiveCores} cores' worth of work at a time`,
  );
  ensureServersInstalled(log);
  const dir = mkdtempSync(join(tmpdir(), 'vigil-e2e-bench-'));
  onCleanup('the temp folder', () => rmSync(dir, { recursive: true, force: true }));
  const nats: ServerHandle = await startNats({
    dataDir: join(dir, 'nats'),
    partitions: PARTITIONS,
  });
  onCleanup('nats-server', () => nats.stop());
  let redis: ServerHandle | undefined;
  if (CHECKPOINT_MS > 0) {
    const r = await startRedis({ dataDir: join(dir, 'redis') });
    onCleanup('redis-server', () => r.stop());
    redis = r;
  }
  log(`nats-server on ${nats.url}${redis ? `, redis-server on ${redis.url}` : ''}, data in ${dir}`);
  const options = resolveOptions(
    {
      natsUrl: nats.url,
      ...(redis ? { redisUrl: redis.url } : {}),
      partitions: PARTITIONS,
      workers: WORKERS,
      workerYoungGenerationMb: YOUNG_GENERATION_MB,
      outOfOrderMs: OUT_OF_ORDER_MS,
      httpPort: 0,
      tickIntervalMs: 0,
      checkpointIntervalMs: CHECKPOINT_MS,
      // Without re-keyed rules, the hop off: the figures stay comparable with those before it.
      rekey: REKEYED > 0 ? 'on' : 'off',
      partitionKey: 'cardId',
    },
    {},
  );

  const rules = generateRules(RULES, SEED, REKEYED);
  const prepared = await prepareLog(nats, options, redis, rules, 'EVENTS');
  const { nc, js, jsm, next, rulesSeq, records } = prepared;
  const idleStartupSeconds = prepared.startupSeconds;
  result.serviceStartupSeconds = round(idleStartupSeconds, 3);
  result.avgEventBytes = round(prepared.bytes / EVENTS);
  result.records = records;
  result.fillEventsPerSec = Math.round(EVENTS / prepared.fillSeconds);

  // 2. (a) The ceiling.
  const ceilingCpu = cpuMeter([nats, redis]);
  const ceiling = await drainCeiling(js);
  const cpuMicrosPerRecord: Record<string, Record<string, number>> = {
    ceiling: perRecord(ceilingCpu(), ceiling.records),
  };
  result.cpuMicrosPerRecord = cpuMicrosPerRecord;
  if (ceiling.records !== records)
    throw new Error(
      `the partition consumers read ${ceiling.records} records, the stream holds ${records}: events missed the partitions`,
    );
  const ceilingRate = ceiling.records / ceiling.seconds;
  result.ceilingEventsPerSec = Math.round(ceilingRate);
  result.ceilingSeconds = round(ceiling.seconds, 3);
  log(
    `(a) ceiling: ${PARTITIONS} bare ordered consumers drained ${fmt(ceiling.records)} records in ${ceiling.seconds.toFixed(2)} s = ${fmt(ceilingRate)}/s`,
  );

  // 3. (b) The service drains the same stream with the rules in force: with the given options,
  //    from the start of the log; resolves once every record was read, the service still running.
  const drain = async (
    opts: VigilOptions,
  ): Promise<{
    service: RunningService;
    target: number;
    serviceSeconds: number;
    readySeconds: number;
  }> => {
    // From the start of the log each time, not from an earlier drain's last checkpoint.
    if (redis && opts.checkpointIntervalMs > 0) await flushRedis(redis.url);
    const t0 = performance.now();
    const t0Wall = Date.now();
    const service = await startTracked(opts);
    // The start-up probe of the mapping adds one record; every record counts once in vigil_events_total.
    const target = (await jsm.streams.info(Streams.events)).state.messages;
    // Workers drain their first partitions before they report ready, so (b) polls from the start.
    let readyAt = 0;
    const readyTimer = setInterval(() => {
      if (readyAt === 0 && service.pool.ready) readyAt = performance.now();
    }, 25);
    readyTimer.unref();
    let drainedAt = 0;
    // With the hop on, REKEY is read too: done once it has stopped growing and all of it is read.
    let lastRekey = -1;
    let doneAt = 0;
    let lastReport = t0;
    let pollMs = 1000;
    let best = { n: 0, t: t0 };
    await waitFor(
      async () => {
        const ms = await readMetrics(service);
        const n = sumOf(ms, 'vigil_events_total');
        const t = performance.now();
        if (n > best.n) best = { n, t };
        else if (t - best.t > DRAIN_STALL_MS)
          throw new Error(
            `the service read no more records in ${DRAIN_STALL_MS / 1000} s (best reading ${best.n} of ${target})`,
          );
        if (t - lastReport > 5000) {
          lastReport = t;
          const reporting = partitionsReporting(ms);
          log(
            `  … ${fmt(n)} / ${fmt(target)} records read (${fmt(n / ((t - t0) / 1000))}/s since start)${reporting < PARTITIONS ? `; only ${reporting} partitions in /metrics: a worker did not answer within 5 s` : ''}`,
          );
        }
        const rekey =
          opts.rekey === 'on' ? (await jsm.streams.info(Streams.rekey)).state.messages : 0;
        const steady = rekey === lastRekey;
        lastRekey = rekey;
        if (n >= target + rekey) {
          // Drained when first seen so; with the hop, confirmed by REKEY not growing since.
          if (doneAt === 0 || !steady) doneAt = t;
          if (rekey === 0 || steady) {
            drainedAt = doneAt;
            return true;
          }
        } else doneAt = 0;
        pollMs = drainPollMs(n / target, t - t0);
        return false;
      },
      DRAIN_TIMEOUT_MS,
      'the service to read all of EVENTS',
      () => pollMs,
    );
    await service.whenReady();
    clearInterval(readyTimer);
    const readySeconds = ((readyAt || performance.now()) - t0) / 1000;
    const serviceSeconds = (drainedAt - t0) / 1000;
    // When each partition began reading, and how long nats-server took to make its consumer:
    // on a long log that is most of the start-up (a filtered consumer counts what it has pending).
    const starts = service.pool
      .status()
      .flatMap((w) => w.started)
      .sort((a, b) => a.at - b.at);
    log(
      `    partitions reading from (ms after the start; their consumer's creation): ${starts.map((s) => `p${s.partition} +${s.at - t0Wall} (${Math.round(s.consumerMs)})`).join(', ')}`,
    );
    return { service, target, serviceSeconds, readySeconds };
  };
  // (b0) The cost of checkpoints (issue: every 1 s against off, ≥ 0.9), side by side on a second
  //      nats-server holding the same log. Sequential drains (on, off, off, on) gave 0.62-0.97
  //      over runs whose two drains without checkpoints differed by up to 18%: the drift between
  //      minutes, not the checkpoints.
  const compare = CHECKPOINT_MS > 0 && !argv.includes('--no-checkpoint-compare');
  if (compare && redis) {
    const natsOff = await startNats({ dataDir: join(dir, 'nats-off'), partitions: PARTITIONS });
    onCleanup('the second nats-server', () => natsOff.stop());
    const optionsOff = resolveOptions(
      {
        natsUrl: natsOff.url,
        partitions: PARTITIONS,
        workers: WORKERS,
        workerYoungGenerationMb: YOUNG_GENERATION_MB,
        outOfOrderMs: OUT_OF_ORDER_MS,
        httpPort: 0,
        tickIntervalMs: 0,
        checkpointIntervalMs: 0,
      },
      {},
    );
    const logOff = await prepareLog(natsOff, optionsOff, undefined, rules, 'second nats-server');
    await flushRedis(redis.url);
    const cpu = cpuMeter([nats, { ...natsOff, name: 'nats-server-off' }, redis]);
    // Two passes with the roles of the two servers swapped: with checkpoints off in both, the
    // service on the first server read 2.6-4.6% more of its log than the one on the second (three
    // runs, 2026-12-02), and one pass would credit that to the checkpoints.
    const passes = [
      await drainSideBySide({ options, jsm }, { options: optionsOff, jsm: logOff.jsm }),
    ];
    await flushRedis(redis.url);
    passes.push(
      await drainSideBySide(
        { options: { ...options, natsUrl: natsOff.url }, jsm: logOff.jsm },
        { options: { ...optionsOff, natsUrl: nats.url }, jsm },
      ),
    );
    const used = cpu();
    await logOff.nc.close();
    await natsOff.stop();
    await flushRedis(redis.url);
    const side = {
      seconds: passes.reduce((a, x) => a + x.seconds, 0),
      onShare: passes.reduce((a, x) => a + x.onShare, 0),
      offShare: passes.reduce((a, x) => a + x.offShare, 0),
      records: passes.reduce((a, x) => a + x.records, 0),
    };
    // The geometric mean of the two passes' ratios: a server's advantage cancels out.
    const sideRatio = Math.sqrt(passes.reduce((a, x) => a * (x.onShare / x.offShare), 1));
    const redisMicros = ((used['redis-server'] ?? 0) * 1e6) / Math.max(1, side.onShare * records);
    // Side by side, redis-server's CPU comes out of both services' share of the cores, so the
    // ratio of their rates leaves it out. Alone, the service with checkpoints would pay it on the
    // same cores: per record, its cost would grow by redis-server's µs over what a record costs
    // (both services and their nats-servers, averaged).
    const bothMicros =
      (((used.benchAndService ?? 0) + (used['nats-server'] ?? 0) + (used['nats-server-off'] ?? 0)) *
        1e6) /
      Math.max(1, side.records);
    const ratio = 1 / (1 / sideRatio + redisMicros / bothMicros);
    result.checkpointThroughputRatio = round(ratio, 3);
    result.checkpointCompare = {
      method:
        'side-by-side, two passes with the servers swapped (geometric mean), with redis-server CPU charged to the checkpointed service',
      seconds: round(side.seconds, 3),
      sideBySideRatio: round(sideRatio, 3),
      passes: passes.map((x) => ({
        seconds: round(x.seconds, 3),
        withCheckpointsShare: round(x.onShare, 4),
        withoutCheckpointsShare: round(x.offShare, 4),
        ratio: round(x.onShare / x.offShare, 3),
      })),
      withCheckpointsEventsPerSec: Math.round((side.onShare * records) / side.seconds),
      withoutCheckpointsEventsPerSec: Math.round((side.offShare * records) / side.seconds),
      redisServerCpuMicrosPerRecord: round(redisMicros, 1),
      cpuMicrosPerRecordBothServices: round(bothMicros, 1),
      cpuSeconds: used,
    };
    log(
      `(b0) side by side, two passes (servers swapped) for ${side.seconds.toFixed(2)} s: with checkpoints ${passes.map((x) => `${(x.onShare * 100).toFixed(1)}%`).join(' and ')} of the log read, without ${passes.map((x) => `${(x.offShare * 100).toFixed(1)}%`).join(' and ')}: ratio ${sideRatio.toFixed(3)} (${passes.map((x) => (x.onShare / x.offShare).toFixed(3)).join(', ')}); with redis-server's ${redisMicros.toFixed(1)} CPU µs per checkpointed record charged to it (a record costs ${bothMicros.toFixed(1)} µs in all) ${ratio.toFixed(3)} (CPU s ${JSON.stringify(used)})`,
    );
  }
  if (ONLY_COMPARE) {
    if (result.checkpointThroughputRatio === undefined)
      throw new Error('--only-checkpoint-compare needs checkpoints on (--checkpoint-ms > 0)');
    result.seconds = round((performance.now() - runStart) / 1000, 1);
    return;
  }
  const serviceCpu = cpuMeter([nats, redis]);
  const { service, target, serviceSeconds, readySeconds } = await drain(options);
  cpuMicrosPerRecord.service = perRecord(serviceCpu(), target);
  log(`    CPU µs per record read: ${JSON.stringify(cpuMicrosPerRecord)}`);
  const serviceRate = target / serviceSeconds;
  const serviceRateExcl = target / Math.max(0.001, serviceSeconds - idleStartupSeconds);
  const afterDrain = await readMetrics(service);
  const alerts = sumOf(afterDrain, 'vigil_alerts_total');
  const dlq = sumOf(afterDrain, 'vigil_dlq_total');
  const judged = sumOf(afterDrain, 'vigil_events_total', 'outcome="judged"');
  // The worker threads' own CPU (their start-up included), beside bench:core's µs per event for
  // the same inputs: what the runtime adds to judging.
  result.workerCpuMicrosPerRecord = round(
    (sumOf(afterDrain, 'vigil_worker_cpu_seconds_total') / target) * 1e6,
    1,
  );
  if (minApplied(afterDrain) < rulesSeq)
    throw new Error(`the rules (seq ${rulesSeq}) are not in force on every partition`);
  Object.assign(result, {
    serviceEventsPerSec: Math.round(serviceRate),
    serviceEventsPerSecExclStartup: Math.round(serviceRateExcl),
    serviceSeconds: round(serviceSeconds, 3),
    serviceReadySecondsUnderLoad: round(readySeconds, 3),
    ratio: round(serviceRate / ceilingRate, 3),
    ratioExclStartup: round(serviceRateExcl / ceilingRate, 3),
    alerts,
    alertsPerEvent: round(alerts / EVENTS, 4),
    deadLetters: dlq,
    // The re-keying hop: what the partitions sent the key spaces' partitions (forwards and reports).
    hopMessagesPerEvent: round(sumOf(afterDrain, 'vigil_hop_sent_total') / EVENTS, 4),
  });
  log(
    `(b) service: read ${fmt(target)} records in ${serviceSeconds.toFixed(2)} s = ${fmt(serviceRate)}/s including start-up, ${fmt(serviceRateExcl)}/s without the ${idleStartupSeconds.toFixed(2)} s of an idle start-up; its workers reported ready after ${readySeconds.toFixed(2)} s`,
  );
  log(
    `    ${fmt(judged)} events judged, ${fmt(alerts)} alerts (${((alerts / EVENTS) * 100).toFixed(2)}% of events), ${fmt(dlq)} dead letters`,
  );
  log(
    `    ratio b/a = ${(serviceRate / ceilingRate).toFixed(3)} (${(serviceRateExcl / ceilingRate).toFixed(3)} excluding start-up)`,
  );

  // 4. (c) Activation latency at ~50% load. The service measures each partition's activation
  //    (stored in CONTROL → marker applied) in vigil_activation_seconds; the histogram's change
  //    across one control message holds exactly its 16 observations, and its slowest partition is
  //    the message's activation time (to the resolution of the buckets).
  // The producer shares the cores: publishing a record and storing it in EVENTS costs the bench
  // and nats-server CPU that the service no longer has. So (c) first finds the capacity with a
  // producer beside it: the producer steps up by 1/8 of (b)'s rate (to 12/8), RAMP_STEP_MS a step, until
  // the service has read less than 99% of a step's records RAMP_GRACE_MS after the step, or the
  // producer itself published less than 97% of the step's rate (the machine carries no more: a
  // service that keeps up with a producer falling behind has not kept up with the rate); (c) runs
  // at LOAD_SHARE of the rate the last step that passed achieved.
  let rampPublished = 0;
  let capacityUnderLoad = 0;
  // Records of EVENTS only: with the hop, REKEY's would make a step look kept up.
  const rampStart = eventLogRecords(await readMetrics(service));
  const ramp: { rate: number; achieved: number; keptUp: number }[] = [];
  for (let step = 1; step <= 12; step++) {
    const rate = Math.max(100, Math.round((serviceRate * step) / 8));
    const before = eventLogRecords(await readMetrics(service));
    const stepProducer = steadyProducer(nc, next, EVENTS + rampPublished, rate);
    await sleep(RAMP_STEP_MS);
    const p = await stepProducer.stop();
    rampPublished += p.published;
    // A service that keeps up has read the step's records a moment after the last one.
    await sleep(RAMP_GRACE_MS);
    const read = eventLogRecords(await readMetrics(service)) - before;
    const keptUp = read / Math.max(1, p.published);
    const achieved = p.published / p.seconds;
    ramp.push({ rate, achieved: Math.round(achieved), keptUp: round(keptUp, 3) });
    if (keptUp < 0.99 || achieved < 0.97 * rate) break;
    capacityUnderLoad = Math.round(Math.min(rate, achieved));
  }
  capacityUnderLoad = Math.max(capacityUnderLoad, ramp[0]?.rate ?? 100);
  // The step it could not keep up with left a backlog: (c) starts once it is read, and with the
  // hop once every key space's partition has read REKEY (all of it counted, REKEY steady).
  let lastRekey = -1;
  await waitFor(
    async () => {
      const ms = await readMetrics(service);
      const rekey =
        options.rekey === 'on' ? (await jsm.streams.info(Streams.rekey)).state.messages : 0;
      const steady = rekey === lastRekey;
      lastRekey = rekey;
      return (
        eventLogRecords(ms) - rampStart >= rampPublished &&
        (rekey === 0 || (steady && sumOf(ms, 'vigil_events_total') - eventLogRecords(ms) >= rekey))
      );
    },
    60_000,
    "the service to read the ramp's records",
    () => 200,
  );
  Object.assign(result, {
    capacityUnderLoadEventsPerSec: capacityUnderLoad,
    loadRamp: ramp,
    loadPercent: LOAD_PERCENT,
  });
  const loadRate = Math.max(100, Math.round(LOAD_SHARE * capacityUnderLoad));
  log(
    `(c) ramp (${RAMP_STEP_MS / 1000} s a step: target rate, rate published, share of its records read ${RAMP_GRACE_MS} ms after it): ${ramp.map((r) => `${fmt(r.rate)}/s ${fmt(r.achieved)}/s ${r.keptUp}`).join(', ')}: capacity with a producer ≈ ${fmt(capacityUnderLoad)}/s`,
  );
  const producer = steadyProducer(nc, next, EVENTS + rampPublished, loadRate);
  let producerStopped = false;
  onCleanup('the producer', async () => {
    if (!producerStopped) await producer.stop().catch(() => undefined);
  });
  log(
    `(c) producer at ${fmt(loadRate)} events/s (${LOAD_SHARE * 100}% of ${fmt(capacityUnderLoad)}/s); ${CONTROLS} rule changes ${CONTROL_SPACING_MS} ms apart (at most ${ACTIVATION_BUDGET_MS / 1000} s)`,
  );
  await sleep(QUICK ? 1000 : 2000);
  const probeRule = rules.find((r) => r.pattern !== undefined) as Rule;
  let last = await readMetrics(service);
  const histFirst = buckets(last, 'vigil_activation_seconds');
  const scavengesFirst = buckets(last, 'vigil_gc_pause_seconds', 'kind="minor"');
  const eventsBefore = sumOf(last, 'vigil_events_total');
  const workerCpuBefore = sumOf(last, 'vigil_worker_cpu_seconds_total');
  const loadCpu = cpuMeter([nats, redis]);
  const tLoad = performance.now();
  const tLoadWall = Date.now();
  const perChange: { ms: number; seenMs: number }[] = [];
  // For a change over the target: each worker's partitions, fastest and slowest. A change that
  // is slow on one worker's partitions only is that worker's (a pause, a backlog), one slow on
  // all of them is upstream (CONTROL, the markers' round trip). An unknown worker is '?'.
  const slowChanges: {
    controlSeq: number;
    ms: number;
    workers: Record<string, [number, number]>;
    /**
     * Each worker's GC pauses of at least GC_REPORT_MS from {@link GC_LEAD_MS} before the publish
     * until the change was seen applied: [kind, ms, start relative to the publish]. Read once
     * the changes are done: a worker reports a pause a turn of its event loop after it, so the
     * pause behind a slow partition may arrive after that partition's application.
     */
    gcPauses: Record<string, [string, number, number][]>;
  }[] = [];
  /** When each slow change was published and seen applied (wall clock), by its index in slowChanges. */
  const slowWindows: { sentAtWall: number; seenAtWall: number }[] = [];
  const workerOf = new Map(
    service.pool.status().flatMap((w) => w.partitions.map((p): [number, number] => [p, w.worker])),
  );
  let timeouts = 0;
  for (let i = 0; i < CONTROLS; i++) {
    if (performance.now() - tLoad > ACTIVATION_BUDGET_MS) {
      log(`    (c) ran out of its ${ACTIVATION_BUDGET_MS / 1000} s after ${i} changes`);
      break;
    }
    const sentAt = performance.now();
    const sentAtWall = Date.now();
    const pattern = { ...(probeRule.pattern as object), value: 1000 + i };
    const body = JSON.stringify({ op: 'upsert-rule', rule: { ...probeRule, pattern } });
    const ack = await js.publish(CONTROL_SUBJECT, body);
    const until = Date.now() + ACTIVATION_TIMEOUT_MS;
    let done = service.pool.activations.activation(ack.seq);
    while ((done?.partitions ?? 0) < PARTITIONS && Date.now() < until) {
      await sleep(ACTIVATION_POLL_MS);
      done = service.pool.activations.activation(ack.seq);
    }
    if (done === undefined || done.partitions < PARTITIONS) {
      // An overloaded service: record the change as "at least the timeout" and stop changing rules.
      timeouts++;
      perChange.push({ ms: ACTIVATION_TIMEOUT_MS, seenMs: NaN });
      log(
        `    control seq ${ack.seq} not applied on every partition within ${ACTIVATION_TIMEOUT_MS / 1000} s; no more changes`,
      );
      break;
    }
    perChange.push({ ms: round(done.maxMs), seenMs: performance.now() - sentAt });
    if (done.maxMs > 100) {
      const workers: Record<string, [number, number]> = {};
      for (const [p, ms] of service.pool.activations.partitionTimes(ack.seq)) {
        const w = String(workerOf.get(p) ?? '?');
        const [lo, hi] = workers[w] ?? [Infinity, -Infinity];
        workers[w] = [Math.min(lo, round(ms)), Math.max(hi, round(ms))];
      }
      slowChanges.push({ controlSeq: ack.seq, ms: round(done.maxMs), workers, gcPauses: {} });
      slowWindows.push({ sentAtWall, seenAtWall: Date.now() });
    }
    await sleep(CONTROL_SPACING_MS - (performance.now() - sentAt));
  }
  last = await readMetrics(service);
  const loadSeconds = (performance.now() - tLoad) / 1000;
  slowChanges.forEach((c, i) => {
    const { sentAtWall, seenAtWall } = slowWindows[i] as (typeof slowWindows)[number];
    for (const w of Object.keys(c.workers))
      c.gcPauses[w] = service.pool.gcPauses
        .between(Number(w), sentAtWall - GC_LEAD_MS, seenAtWall)
        .map((g) => [g.kind, round(g.ms), Math.round(g.at - sentAtWall)]);
    log(
      `    control seq ${c.controlSeq} took ${c.ms} ms; per worker, its partitions' fastest and slowest, and its GC pauses ≥ ${GC_REPORT_MS} ms from ${GC_LEAD_MS} ms before: ${Object.entries(
        c.workers,
      )
        .map(
          ([w, [lo, hi]]) =>
            `worker ${w} ${lo}-${hi} ms${(c.gcPauses[w] ?? []).map(([k, ms, at]) => ` (${k} ${ms} ms at ${at >= 0 ? '+' : ''}${at} ms)`).join('')}`,
        )
        .join(', ')}`,
    );
  });
  // Every worker's long GC pauses while the changes ran, by kind: how often a change can meet one.
  const gcUnderLoad: Record<string, { count: number; totalMs: number; maxMs: number }> = {};
  for (let w = 0; w < WORKERS; w++)
    for (const g of service.pool.gcPauses.between(w, tLoadWall, Date.now())) {
      const k = (gcUnderLoad[g.kind] ??= { count: 0, totalMs: 0, maxMs: 0 });
      k.count++;
      k.totalMs = round(k.totalMs + g.ms);
      k.maxMs = Math.max(k.maxMs, round(g.ms));
    }
  const histLast = buckets(last, 'vigil_activation_seconds');
  // Every scavenge of the workers meanwhile (the histogram), and the longest of those the workers
  // reported one by one (each of at least GC_REPORT_MS).
  const scavengesLast = buckets(last, 'vigil_gc_pause_seconds', 'kind="minor"');
  const longScavenges: number[] = [];
  for (let w = 0; w < WORKERS; w++)
    for (const g of service.pool.gcPauses.between(w, tLoadWall, Date.now()))
      if (g.kind === 'minor') longScavenges.push(g.ms);
  longScavenges.sort((a, b) => a - b);
  const scavenges = (scavengesLast.get(Infinity) ?? 0) - (scavengesFirst.get(Infinity) ?? 0);
  // The p99 is exact when it is among the scavenges reported one by one (those of at least
  // GC_REPORT_MS); else it is read from the histogram, whose buckets are coarse.
  const fromTop = scavenges - Math.ceil(0.99 * scavenges);
  const scavengeP99 =
    fromTop < longScavenges.length
      ? (longScavenges[longScavenges.length - 1 - fromTop] as number)
      : histogramQuantileMs(scavengesFirst, scavengesLast, 0.99);
  const servedRate = (sumOf(last, 'vigil_events_total') - eventsBefore) / loadSeconds;
  // Under load the bench also produces: its process holds the producer and the service.
  cpuMicrosPerRecord.underLoad = perRecord(
    loadCpu(),
    sumOf(last, 'vigil_events_total') - eventsBefore,
  );
  result.workerCpuMicrosPerRecordUnderLoad = round(
    ((sumOf(last, 'vigil_worker_cpu_seconds_total') - workerCpuBefore) /
      Math.max(1, sumOf(last, 'vigil_events_total') - eventsBefore)) *
      1e6,
    1,
  );
  const lagAtEnd = sumOf(last, 'vigil_consumer_lag');
  const produced = await producer.stop();
  producerStopped = true;
  const uppers = perChange.map((c) => c.ms).sort((a, b) => a - b);
  const seen = perChange
    .map((c) => c.seenMs)
    .filter((x) => !Number.isNaN(x))
    .sort((a, b) => a - b);
  const p50 = quantile(uppers, 0.5);
  const p90 = quantile(uppers, 0.9);
  const p99 = quantile(uppers, 0.99);
  const observations = (histLast.get(Infinity) ?? 0) - (histFirst.get(Infinity) ?? 0);
  const partP50 = histogramQuantileMs(histFirst, histLast, 0.5);
  const partP99 = histogramQuantileMs(histFirst, histLast, 0.99);
  Object.assign(result, {
    activationMethod:
      'per control message: stored in CONTROL -> marker applied on the slowest of the 16 partitions, as the workers report each application to the main thread (WorkerPool.activations); per partition: the vigil_activation_seconds histogram between two /metrics reads',
    activationP50Ms: p50,
    activationP90Ms: p90,
    activationP99Ms: p99,
    activationMaxMs: uppers[uppers.length - 1],
    activationSamples: perChange.length,
    activationTimeouts: timeouts,
    activationPerPartitionP50Ms: partP50 === null ? null : round(partP50),
    activationPerPartitionP99Ms: partP99 === null ? null : round(partP99),
    activationObservations: observations,
    activationSlowChanges: slowChanges,
    gcPausesUnderLoad: gcUnderLoad,
    scavengesUnderLoad: scavenges,
    scavengeP99Ms: scavengeP99 === null ? null : round(scavengeP99),
    // Null: no scavenge reached GC_REPORT_MS.
    scavengeMaxMs: longScavenges.length === 0 ? null : round(longScavenges.at(-1) as number),
    scavengesOver20Ms: longScavenges.filter((ms) => ms > 20).length,
    loadEventsPerSec: Math.round(produced.published / produced.seconds),
    loadServedRecordsPerSec: Math.round(servedRate),
    loadLagAtEnd: lagAtEnd,
  });
  log(
    `    producer published ${fmt(produced.published)} events in ${produced.seconds.toFixed(1)} s (${fmt(produced.published / produced.seconds)}/s); the service read ${fmt(servedRate)} records/s meanwhile, consumer lag at the end ${fmt(lagAtEnd)}`,
  );
  log(
    `    worker GC pauses ≥ ${GC_REPORT_MS} ms meanwhile: ${
      Object.entries(gcUnderLoad)
        .map(([k, g]) => `${k} ${g.count} (${g.totalMs} ms in all, longest ${g.maxMs} ms)`)
        .join(', ') || 'none'
    }`,
  );
  log(
    `    worker scavenges meanwhile: ${result.scavengesUnderLoad}, p99 ${result.scavengeP99Ms ?? '-'} ms, longest ${result.scavengeMaxMs ?? `< ${GC_REPORT_MS}`} ms, ${result.scavengesOver20Ms} over 20 ms`,
  );
  log(
    `    activation, all ${PARTITIONS} partitions (slowest partition): p50 ${p50} ms, p90 ${p90} ms, p99 ${p99} ms, max ${uppers[uppers.length - 1]} ms; per change: ${perChange.map((c) => c.ms).join(' ')}`,
  );
  log(
    `    per partition (${fmt(observations)} observations, interpolated in buckets): p50 ${partP50?.toFixed(1)} ms, p99 ${partP99?.toFixed(1)} ms; seen applied by the bench (polling every ${ACTIVATION_POLL_MS} ms) after p50 ${Math.round(quantile(seen, 0.5))} ms, max ${Math.round(seen[seen.length - 1] ?? NaN)} ms`,
  );
  const expected = (perChange.length - timeouts) * PARTITIONS;
  if (observations !== expected)
    log(
      `    note: ${observations} observations, not ${expected}: a change timed out, or a worker restarted and replayed markers`,
    );

  await service.stop();
  const ratio = serviceRate / ceilingRate;
  result.targetRatioMet = ratio >= 0.5;
  // 100 ms is a bucket edge: "≤ 100" (slowest partition in the (50, 100] bucket or below) is the target.
  // The target is set at 50% load: at another load the run says what it saw, not met or not.
  const atTargetLoad = LOAD_PERCENT === 50;
  if (atTargetLoad) result.targetActivationMet = p99 <= 100;
  log(
    `targets: service ≥ 0.5 × ceiling: ${ratio >= 0.5 ? 'met' : 'NOT met'} (${ratio.toFixed(3)}; ${(serviceRateExcl / ceilingRate).toFixed(3)} excluding start-up); activation p99 < 100 ms: ${atTargetLoad ? (p99 <= 100 ? 'met' : 'NOT met') : `not judged at ${LOAD_PERCENT}% load`} (≤ ${p99} ms)`,
  );
  result.seconds = round((performance.now() - runStart) / 1000, 1);
}

const started = performance.now();
try {
  await main();
  await cleanup();
  log(`done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
} catch (e) {
  console.error(`[e2e-bench] failed: ${(e as Error).stack ?? String(e)}`);
  result.error = (e as Error).message;
  result.seconds = round((performance.now() - started) / 1000, 1);
  await cleanup();
  process.exitCode = 1;
}
// Everything this run started is stopped by now; leftover timers (the service's 5 s /metrics
// timeouts, client reconnect timers) must not keep the process alive after the last line.
process.stdout.write(`${JSON.stringify(result)}\n`, () => process.exit());
