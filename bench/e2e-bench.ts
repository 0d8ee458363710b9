/**
 * End-to-end benchmark: the service on a real nats-server against the bare JetStream ceiling.
 *
 *   node --import tsx bench/e2e-bench.ts              500,000 events over 100,000 keys, P = 16
 *   node --import tsx bench/e2e-bench.ts --quick      smoke run: 50,000 events
 *   node --import tsx bench/e2e-bench.ts --events N   N events (also --keys N, --rules N, --seed N)
 *
 * Steps, all in one run (see bench/README.md for what each figure means):
 *  0. nats-server in a temp folder; 1,000 rules published to `vigil.control` as one `replace-all`;
 *     a first, short service run writes their epoch markers at the head of every partition.
 *  1. EVENTS is filled with N events (~200 bytes) published to `events.<key>` (core publish, one
 *     reply inbox for the JetStream acks, a window of acks in flight).
 *  2. (a) ceiling: 16 bare ordered consumers, one per partition, drain the stream.
 *  3. (b) the service (W = cores workers) drains the stream with the rules in force.
 *  4. (c) activation latency of rule changes while a producer keeps the service at ~50% load.
 *
 * Progress goes to stdout; the last line of output is one JSON object with every figure.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { connect, createInbox, type Msg, type NatsConnection } from '@nats-io/transport-node';
import {
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import type { Rule, TopCondition } from '../rules/index.js';
import {
  CONTROL_SUBJECT,
  DEFAULT_OPTIONS,
  ensureStreams,
  eventSubject,
  partitionFilter,
  resolveOptions,
  startNats,
  startService,
  Streams,
  verifyMapping,
  type Logger,
  type RunningService,
  type ServerHandle,
  type VigilOptions,
} from '../service/index.js';

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
const EVENTS = numberArg('events', QUICK ? 50_000 : 500_000);
const KEYS = numberArg('keys', 100_000);
const RULES = numberArg('rules', 1000);
const SEED = numberArg('seed', 20261129) >>> 0;
const PARTITIONS = 16;
const WORKERS = Math.max(1, availableParallelism());
/** JetStream acks awaited at once while filling EVENTS. */
const FILL_WINDOW = 2000;
/** Control messages of the activation measurement, and the time between them. */
const CONTROLS = QUICK ? 20 : 40;
const CONTROL_SPACING_MS = 250;
/** Share of the service's measured drain rate the producer keeps up during (c). */
const LOAD_SHARE = 0.5;
/** How often /metrics is read while waiting for an activation, and while draining. */
const ACTIVATION_POLL_MS = 5;
const DRAIN_POLL_MS = 50;
/** A generous bound on each wait, so a stuck service fails the run instead of hanging it. */
const DRAIN_TIMEOUT_MS = Math.max(120_000, EVENTS / 2);

if (EVENTS < 1 || KEYS < 1 || RULES < 20)
  throw new Error('--events and --keys must be at least 1, --rules at least 20');

const log = (line: string): void => console.log(`[e2e-bench] ${line}`);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const round = (x: number, digits = 1): number => Math.round(x * 10 ** digits) / 10 ** digits;
const fmt = (x: number): string => Math.round(x).toLocaleString('en-US');

// ---------------------------------------------------------------------------------------------
// Deterministic inputs: 20 event types, payment-like events, 1,000 rules
// ---------------------------------------------------------------------------------------------

/** mulberry32: a small, fast, seeded 32-bit PRNG returning floats in [0, 1). */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Rand = () => number;

const int = (rand: Rand, lo: number, hi: number): number => lo + Math.floor(rand() * (hi - lo + 1));
const pick = <T>(rand: Rand, xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;

function sample<T>(rand: Rand, xs: readonly T[], n: number): T[] {
  const copy = [...xs];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [copy[i], copy[j]] = [copy[j] as T, copy[i] as T];
  }
  return copy.slice(0, Math.min(n, copy.length));
}

function weighted<T>(rand: Rand, xs: readonly T[], weights: readonly number[]): T {
  const total = weights.reduce((a, b) => a + b, 0);
  let r = rand() * total;
  for (let i = 0; i < xs.length; i++) {
    r -= weights[i] as number;
    if (r < 0) return xs[i] as T;
  }
  return xs[xs.length - 1] as T;
}

/** A payment-like amount: log-normal, median 120, long tail; rounded to cents. */
function amount(rand: Rand): number {
  const u = 1 - rand();
  const z = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rand());
  return Math.round(Math.exp(Math.log(120) + 1.3 * z) * 100) / 100;
}

const EVENT_TYPES = [
  'payment',
  'login',
  'transfer',
  'withdrawal',
  'deposit',
  'refund',
  'chargeback',
  'card_added',
  'password_reset',
  'address_change',
  'p2p_send',
  'bill_pay',
  'top_up',
  'atm_withdrawal',
  'wire_out',
  'crypto_buy',
  'loan_apply',
  'account_open',
  'device_change',
  'email_change',
] as const;

// prettier-ignore
const COUNTRIES = [
  'US', 'GB', 'DE', 'FR', 'ES', 'IT', 'NL', 'PL', 'SE', 'IE', 'CA', 'MX', 'BR', 'AR', 'CO', 'NG',
  'GH', 'KE', 'ZA', 'EG', 'RU', 'UA', 'TR', 'IN', 'PK', 'CN', 'HK', 'SG', 'PH', 'VN', 'ID', 'AE',
] as const;
const COUNTRY_WEIGHTS: readonly number[] = COUNTRIES.map((_, i) =>
  i === 0 ? 30 : i === 1 ? 10 : i === 2 ? 8 : i === 3 ? 6 : 2,
);
const CHANNELS = ['web', 'mobile', 'pos', 'atm', 'api'] as const;
const CHANNEL_WEIGHTS = [35, 35, 18, 7, 5] as const;
// prettier-ignore
const MCCS = [
  '5411', '5812', '5814', '5912', '5999', '4829', '6011', '6012', '6051', '6540', '7995', '7273',
  '5967', '5816', '4814', '5732', '5944', '5094', '4722', '7011', '3000', '4111', '5541', '5311',
  '5651', '5691', '5045', '7399', '8999', '9399',
] as const;
const CURRENCIES = ['USD', 'EUR', 'GBP'] as const;

const leaf = (fact: string, operator: string, value: unknown) => ({ fact, operator, value });

/**
 * A plain rule (no pattern): the fraud shapes of `rules-bench.ts`, with thresholds chosen so that
 * a rule rarely accepts an event (about 1 in 10,000): alerts stay a small fraction of events.
 */
function plainRule(rand: Rand, id: string, type: string): Rule {
  const countries = (lo: number, hi: number): string[] =>
    sample(rand, COUNTRIES, int(rand, lo, hi));
  const mccs = (lo: number, hi: number): string[] => sample(rand, MCCS, int(rand, lo, hi));
  const r = rand();
  let when: TopCondition;
  if (r < 0.5) {
    // Big amount from a risky country through a risky channel or merchant category.
    when = {
      all: [
        leaf(
          'amount',
          pick(rand, ['greaterThan', 'greaterThanInclusive']),
          pick(rand, [3000, 5000, 8000, 12000]),
        ),
        leaf('country', 'in', countries(4, 10)),
        { any: [leaf('channel', 'equal', pick(rand, CHANNELS)), leaf('mcc', 'in', mccs(2, 10))] },
      ],
    };
  } else if (r < 0.7) {
    // Very big amount outside the usual countries on some channels.
    when = {
      all: [
        leaf('amount', 'greaterThanInclusive', pick(rand, [5000, 10000])),
        leaf('country', 'notIn', countries(3, 6)),
        leaf('channel', 'in', sample(rand, CHANNELS, int(rand, 2, 3))),
      ],
    };
  } else if (r < 0.85) {
    // Huge amount anywhere, or a rare country, merchant category and channel together.
    when = {
      any: [
        leaf('amount', 'greaterThan', pick(rand, [20000, 50000])),
        {
          all: [
            leaf('country', 'in', sample(rand, COUNTRIES.slice(4), int(rand, 1, 3))),
            leaf('mcc', 'in', mccs(2, 4)),
            leaf('channel', 'equal', 'atm'),
          ],
        },
      ],
    };
  } else {
    // Card testing: tiny amounts online, outside home countries.
    when = {
      all: [
        leaf('amount', 'lessThan', pick(rand, [0.5, 1, 2])),
        leaf('channel', 'equal', pick(rand, ['web', 'api'])),
        { not: leaf('country', 'in', countries(2, 5)) },
      ],
    };
  }
  return {
    id,
    on: [type],
    when,
    alert: {
      severity: pick(rand, ['low', 'medium', 'high']),
      title: '{{type}} of {{amount}} from {{country}} on {{cardId}}',
    },
  };
}

/** A threshold rule: count or sum over a sliding window, keyed by the event's key (the default). */
function thresholdRule(rand: Rand, id: string, type: string): Rule {
  const filter: TopCondition = pick(rand, [
    { all: [leaf('amount', 'greaterThan', pick(rand, [50, 100, 200]))] },
    { all: [leaf('channel', 'in', sample(rand, CHANNELS, 2))] },
    { all: [leaf('country', 'notIn', ['US', 'GB', 'DE'])] },
  ]);
  const pattern =
    rand() < 0.5
      ? {
          kind: 'threshold' as const,
          aggregate: 'count' as const,
          window: pick(rand, ['5m', '10m', '30m']),
          operator: '>=' as const,
          value: int(rand, 5, 8),
        }
      : {
          kind: 'threshold' as const,
          aggregate: 'sum' as const,
          field: 'amount',
          window: pick(rand, ['10m', '1h']),
          operator: '>' as const,
          value: pick(rand, [30000, 50000, 100000]),
        };
  return {
    id,
    on: [type],
    when: filter,
    pattern,
    alert: { severity: 'high', title: '{{type}} velocity on {{key}}', suppressFor: '10m' },
  };
}

/**
 * `n` rules over the 20 event types, round robin, so each event meets n/20 of them (5%):
 * 80% plain conditions, 20% threshold rules.
 */
function generateRules(n: number, seed: number): Rule[] {
  const rand = mulberry32(seed);
  const rules: Rule[] = [];
  for (let i = 0; i < n; i++) {
    const type = EVENT_TYPES[i % EVENT_TYPES.length] as string;
    const threshold = i % 5 === 4;
    const id = `${threshold ? 'thr' : 'rule'}-${String(i).padStart(4, '0')}`;
    rules.push(threshold ? thresholdRule(rand, id, type) : plainRule(rand, id, type));
  }
  return rules;
}

/** Payment-like events, about 200 bytes of JSON each; event time is the publish time (no `ts`). */
function eventGenerator(
  seed: number,
  keys: number,
): (i: number) => { key: string; data: Uint8Array } {
  const rand = mulberry32(seed ^ 0x5bd1e995);
  const encoder = new TextEncoder();
  const keyWidth = String(keys - 1).length;
  return (i) => {
    const key = `k${String(Math.floor(rand() * keys)).padStart(keyWidth, '0')}`;
    const json =
      `{"type":"${pick(rand, EVENT_TYPES)}","id":"e${i}","cardId":"${key}",` +
      `"amount":${amount(rand)},"currency":"${pick(rand, CURRENCIES)}",` +
      `"country":"${weighted(rand, COUNTRIES, COUNTRY_WEIGHTS)}",` +
      `"channel":"${weighted(rand, CHANNELS, CHANNEL_WEIGHTS)}","mcc":"${pick(rand, MCCS)}",` +
      `"deviceId":"d${int(rand, 0, 99999)}","ip":"10.${int(rand, 0, 255)}.${int(rand, 0, 255)}.${int(rand, 1, 254)}",` +
      `"merchant":"m${int(rand, 0, 9999)}"}`;
    return { key, data: encoder.encode(json) };
  };
}

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

  /** Publishes once there is room in the window. */
  async publish(subject: string, data: Uint8Array): Promise<void> {
    if (this.error !== undefined) throw new Error(`a JetStream publish failed: ${this.error}`);
    if (this.sent - this.acked >= this.window) await new Promise<void>((r) => (this.wake = r));
    this.nc.publish(subject, data, { reply: this.inbox });
    this.sent++;
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

/** The lowest `vigil_control_seq_applied` over the partitions (0 when one has not reported yet). */
function minApplied(ms: readonly Metric[]): number {
  const byPartition = new Map<string, number>();
  for (const m of ms)
    if (m.name === 'vigil_control_seq_applied') byPartition.set(m.labels, m.value);
  return byPartition.size < PARTITIONS ? 0 : Math.min(...byPartition.values());
}

/** Cumulative buckets of a histogram: upper bound (s) → count. */
function buckets(ms: readonly Metric[], name: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const m of ms) {
    if (m.name !== `${name}_bucket`) continue;
    const le = /le="([^"]+)"/.exec(m.labels)?.[1];
    if (le !== undefined) out.set(le === '+Inf' ? Infinity : Number(le), m.value);
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
  pollMs: number,
): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(pollMs);
  }
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

/** Everything the run started, stopped in reverse order even when it fails. */
const cleanups: (() => Promise<void> | void)[] = [];
let cleaning: Promise<void> | undefined;

function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    while (cleanups.length > 0) {
      const f = cleanups.pop() as () => Promise<void> | void;
      try {
        await f();
      } catch (e) {
        console.error(`[e2e-bench] cleanup: ${(e as Error).message}`);
      }
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

function serviceOptions(natsUrl: string): VigilOptions {
  return resolveOptions(
    { natsUrl, partitions: PARTITIONS, workers: WORKERS, httpPort: 0, tickIntervalMs: 0 },
    {},
  );
}

/** Starts the service and registers its stop; the returned `stop` may be called earlier. */
async function startTracked(natsUrl: string): Promise<RunningService> {
  const service = await startService(serviceOptions(natsUrl), serviceLog);
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => (stopped ??= service.stop());
  cleanups.push(stop);
  return { ...service, stop };
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
      await pipe.publish(eventSubject(e.key), e.data);
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
        await pipe.publish(eventSubject(e.key), e.data);
      }
      await sleep(2);
    }
    await pipe.drain();
  })();
  return {
    async stop() {
      running = false;
      try {
        await loop;
      } finally {
        pipe.close();
      }
      return { published: pipe.published, seconds: (performance.now() - t0) / 1000 };
    },
  };
}

async function main(): Promise<Record<string, unknown>> {
  const runStart = performance.now();
  log(
    `${fmt(EVENTS)} events over ${fmt(KEYS)} keys, ${RULES} rules, P=${PARTITIONS}, W=${WORKERS} workers${QUICK ? ' (quick)' : ''}`,
  );

  const dir = mkdtempSync(join(tmpdir(), 'vigil-e2e-bench-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const nats: ServerHandle = await startNats({
    dataDir: join(dir, 'nats'),
    partitions: PARTITIONS,
  });
  cleanups.push(() => nats.stop());
  log(`nats-server on ${nats.url}, data in ${dir}`);

  const nc = await connect({ servers: nats.url, name: 'e2e-bench', noAsyncTraces: true });
  cleanups.push(() => nc.close());
  const js = jetstream(nc);
  const jsm: JetStreamManager = await jetstreamManager(nc);
  await ensureStreams(jsm, DEFAULT_OPTIONS.duplicateWindowMs);
  await verifyMapping(nc, PARTITIONS);

  // 0. Rules first, and their markers at the head of every partition: a change takes effect at
  //    its marker, so the events below must come after it to be judged by these rules (G2).
  const rules = generateRules(RULES, SEED);
  const controlBody = JSON.stringify({ op: 'replace-all', rules, meta: { actor: 'e2e-bench' } });
  const { seq: rulesSeq } = await js.publish(CONTROL_SUBJECT, controlBody);
  log(
    `published ${RULES} rules as one replace-all (${fmt(controlBody.length)} bytes, CONTROL seq ${rulesSeq})`,
  );
  // The same start as (b), on a log that holds no events yet: its time to ready is the start-up
  // cost (threads, TypeScript loader, CONTROL catch-up, consumers) without any draining in it.
  const seedStart = performance.now();
  let idleStartupSeconds: number;
  {
    const seeder = await startTracked(nats.url);
    await seeder.whenReady();
    idleStartupSeconds = (performance.now() - seedStart) / 1000;
    await waitFor(
      async () => minApplied(await readMetrics(seeder)) >= rulesSeq,
      60_000,
      'the rules to be applied on every partition',
      20,
    );
    await seeder.stop();
  }
  const seedSeconds = (performance.now() - seedStart) / 1000;
  log(
    `a first service run (ready after ${idleStartupSeconds.toFixed(2)} s) wrote the epoch markers of seq ${rulesSeq} into the ${PARTITIONS} partitions (${seedSeconds.toFixed(1)} s in all)`,
  );

  // 1. Fill EVENTS before any timing.
  const next = eventGenerator(SEED, KEYS);
  const before = (await jsm.streams.info(Streams.events)).state.messages;
  const filled = await fill(nc, next, EVENTS);
  const records = (await jsm.streams.info(Streams.events)).state.messages;
  if (records - before !== EVENTS)
    throw new Error(`EVENTS grew by ${records - before} messages, expected ${EVENTS}`);
  const fillRate = EVENTS / filled.seconds;
  const avgEventBytes = filled.bytes / EVENTS;
  log(
    `filled EVENTS: ${fmt(EVENTS)} events (avg ${avgEventBytes.toFixed(0)} bytes) in ${filled.seconds.toFixed(2)} s = ${fmt(fillRate)}/s; ${fmt(records)} records in the stream`,
  );

  // 2. (a) The ceiling.
  const ceiling = await drainCeiling(js);
  if (ceiling.records !== records)
    throw new Error(
      `the partition consumers read ${ceiling.records} records, the stream holds ${records}: events missed the partitions`,
    );
  const ceilingRate = ceiling.records / ceiling.seconds;
  log(
    `(a) ceiling: ${PARTITIONS} bare ordered consumers drained ${fmt(ceiling.records)} records in ${ceiling.seconds.toFixed(2)} s = ${fmt(ceilingRate)}/s`,
  );

  // 3. (b) The service drains the same stream with the rules in force.
  const t0 = performance.now();
  const service = await startTracked(nats.url);
  // The start-up probe of the mapping adds one record; every record counts once in vigil_events_total.
  const target = (await jsm.streams.info(Streams.events)).state.messages;
  // Workers start draining their first partitions before they report ready, so (b) polls from the start.
  let readyAt = 0;
  void service.whenReady(DRAIN_TIMEOUT_MS).then(
    () => (readyAt = performance.now()),
    () => undefined,
  );
  let drainedAt = 0;
  let lastReport = t0;
  await waitFor(
    async () => {
      const n = sumOf(await readMetrics(service), 'vigil_events_total');
      const t = performance.now();
      if (t - lastReport > 3000) {
        lastReport = t;
        log(
          `  … ${fmt(n)} / ${fmt(target)} records read (${fmt(n / ((t - t0) / 1000))}/s since start)`,
        );
      }
      if (n < target) return false;
      drainedAt = t;
      return true;
    },
    DRAIN_TIMEOUT_MS,
    'the service to read all of EVENTS',
    DRAIN_POLL_MS,
  );
  await service.whenReady();
  const readySeconds = (readyAt - t0) / 1000;
  const serviceSeconds = (drainedAt - t0) / 1000;
  const serviceRate = target / serviceSeconds;
  const serviceRateExcl = target / Math.max(0.001, serviceSeconds - idleStartupSeconds);
  const afterDrain = await readMetrics(service);
  const alerts = sumOf(afterDrain, 'vigil_alerts_total');
  const dlq = sumOf(afterDrain, 'vigil_dlq_total');
  const judged = sumOf(afterDrain, 'vigil_events_total', 'outcome="judged"');
  const applied = minApplied(afterDrain);
  if (applied < rulesSeq)
    throw new Error(`the rules (seq ${rulesSeq}) are not in force on every partition`);
  log(
    `(b) service: read ${fmt(target)} records in ${serviceSeconds.toFixed(2)} s = ${fmt(serviceRate)}/s including start-up, ${fmt(serviceRateExcl)}/s without the ${idleStartupSeconds.toFixed(2)} s of an idle start-up; /readyz said ready after ${readySeconds.toFixed(2)} s`,
  );
  log(
    `    ${fmt(judged)} events judged, ${fmt(alerts)} alerts (${((alerts / EVENTS) * 100).toFixed(2)}% of events), ${fmt(dlq)} dead letters`,
  );
  log(
    `    ratio b/a = ${(serviceRate / ceilingRate).toFixed(3)} (${(serviceRateExcl / ceilingRate).toFixed(3)} excluding start-up)`,
  );

  // 4. (c) Activation latency at ~50% load.
  const loadRate = Math.max(100, Math.round(LOAD_SHARE * serviceRateExcl));
  const producer = steadyProducer(nc, next, EVENTS, loadRate);
  let producerStopped = false;
  cleanups.push(async () => {
    if (!producerStopped) await producer.stop().catch(() => undefined);
  });
  log(
    `(c) producer at ${fmt(loadRate)} events/s (${LOAD_SHARE * 100}% of ${fmt(serviceRateExcl)}/s); ${CONTROLS} rule changes ${CONTROL_SPACING_MS} ms apart`,
  );
  await sleep(QUICK ? 1000 : 2000);
  const probeRule = rules.find((r) => r.pattern !== undefined) as Rule;
  const histBefore = buckets(await readMetrics(service), 'vigil_activation_seconds');
  const eventsBefore = sumOf(await readMetrics(service), 'vigil_events_total');
  const tLoad = performance.now();
  const latencies: number[] = [];
  const ackLatencies: number[] = [];
  for (let i = 0; i < CONTROLS; i++) {
    const sentAt = performance.now();
    const pattern = { ...(probeRule.pattern as object), value: 1000 + i };
    const body = JSON.stringify({ op: 'upsert-rule', rule: { ...probeRule, pattern } });
    const ack = await js.publish(CONTROL_SUBJECT, body);
    const ackedAtMs = Date.now();
    const stored = await jsm.streams.getMessage(Streams.control, { seq: ack.seq });
    const committedMs = stored?.time.getTime() ?? ackedAtMs;
    let appliedAtMs = 0;
    await waitFor(
      async () => {
        const ms = await readMetrics(service);
        if (minApplied(ms) < ack.seq) return false;
        appliedAtMs = Date.now();
        return true;
      },
      30_000,
      `control seq ${ack.seq} to be applied on every partition`,
      ACTIVATION_POLL_MS,
    );
    latencies.push(appliedAtMs - committedMs);
    ackLatencies.push(appliedAtMs - ackedAtMs);
    const wait = CONTROL_SPACING_MS - (performance.now() - sentAt);
    if (wait > 0) await sleep(wait);
  }
  const afterLoad = await readMetrics(service);
  const loadSeconds = (performance.now() - tLoad) / 1000;
  const histAfter = buckets(afterLoad, 'vigil_activation_seconds');
  const servedRate = (sumOf(afterLoad, 'vigil_events_total') - eventsBefore) / loadSeconds;
  const lagAtEnd = sumOf(afterLoad, 'vigil_consumer_lag');
  const produced = await producer.stop();
  producerStopped = true;
  const sorted = [...latencies].sort((a, b) => a - b);
  const sortedAck = [...ackLatencies].sort((a, b) => a - b);
  const p50 = quantile(sorted, 0.5);
  const p99 = quantile(sorted, 0.99);
  const histP50 = histogramQuantileMs(histBefore, histAfter, 0.5);
  const histP99 = histogramQuantileMs(histBefore, histAfter, 0.99);
  log(
    `    producer published ${fmt(produced.published)} events in ${produced.seconds.toFixed(1)} s (${fmt(produced.published / produced.seconds)}/s); the service read ${fmt(servedRate)} records/s while the changes ran, consumer lag at the end ${fmt(lagAtEnd)}`,
  );
  log(
    `    activation (stored in CONTROL → applied on all ${PARTITIONS} partitions, /metrics polled every ${ACTIVATION_POLL_MS} ms): p50 ${p50} ms, p99 ${p99} ms, max ${sorted[sorted.length - 1]} ms; from the publish ack: p50 ${quantile(sortedAck, 0.5)} ms, p99 ${quantile(sortedAck, 0.99)} ms`,
  );
  log(
    `    vigil_activation_seconds (per partition, ${fmt((histAfter.get(Infinity) ?? 0) - (histBefore.get(Infinity) ?? 0))} observations, interpolated in buckets): p50 ${histP50?.toFixed(1)} ms, p99 ${histP99?.toFixed(1)} ms`,
  );

  await service.stop();
  await cleanup();
  const ratio = serviceRate / ceilingRate;
  const ratioExcl = serviceRateExcl / ceilingRate;
  const seconds = (performance.now() - runStart) / 1000;
  log(
    `targets: service ≥ 0.5 × ceiling: ${ratio >= 0.5 ? 'met' : 'NOT met'} (${ratio.toFixed(3)}; ${ratioExcl.toFixed(3)} excluding start-up); activation p99 < 100 ms: ${p99 < 100 ? 'met' : 'NOT met'} (${p99} ms)`,
  );
  log(`done in ${seconds.toFixed(1)} s`);
  return {
    bench: 'e2e',
    quick: QUICK,
    events: EVENTS,
    keys: KEYS,
    rules: RULES,
    partitions: PARTITIONS,
    workers: WORKERS,
    seed: SEED,
    avgEventBytes: round(avgEventBytes),
    records,
    fillEventsPerSec: Math.round(fillRate),
    ceilingEventsPerSec: Math.round(ceilingRate),
    ceilingSeconds: round(ceiling.seconds, 3),
    serviceEventsPerSec: Math.round(serviceRate),
    serviceEventsPerSecExclStartup: Math.round(serviceRateExcl),
    serviceStartupSeconds: round(idleStartupSeconds, 3),
    serviceReadySecondsUnderLoad: round(readySeconds, 3),
    serviceSeconds: round(serviceSeconds, 3),
    ratio: round(ratio, 3),
    ratioExclStartup: round(ratioExcl, 3),
    alerts,
    deadLetters: dlq,
    activationMethod: `poll /metrics every ${ACTIVATION_POLL_MS} ms until vigil_control_seq_applied >= seq on all partitions; from the CONTROL stored timestamp`,
    activationP50Ms: p50,
    activationP99Ms: p99,
    activationMaxMs: sorted[sorted.length - 1],
    activationFromAckP50Ms: quantile(sortedAck, 0.5),
    activationFromAckP99Ms: quantile(sortedAck, 0.99),
    activationSamples: latencies.length,
    activationHistogramP50Ms: histP50 === null ? null : round(histP50),
    activationHistogramP99Ms: histP99 === null ? null : round(histP99),
    loadEventsPerSec: Math.round(produced.published / produced.seconds),
    loadServedRecordsPerSec: Math.round(servedRate),
    loadLagAtEnd: lagAtEnd,
    targetRatioMet: ratio >= 0.5,
    targetActivationMet: p99 < 100,
    seedSeconds: round(seedSeconds, 2),
    seconds: round(seconds, 1),
  };
}

try {
  const result = await main();
  console.log(JSON.stringify(result));
} catch (e) {
  console.error(`[e2e-bench] failed: ${(e as Error).stack ?? String(e)}`);
  await cleanup();
  process.exitCode = 1;
}
