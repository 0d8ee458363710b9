/**
 * The rules core alone on the end-to-end benchmark's inputs: the same 1,000 rules and ~200-byte
 * events, through `processRecord` in one thread, with no NATS, no Redis and no worker threads.
 * This is the per-core budget the service spends on rules, and the profile target for the hot path.
 *
 *   node --import tsx bench/core-bench.ts             200,000 events over 100,000 keys, 1,000 rules
 *   node --import tsx bench/core-bench.ts --quick     50,000 events
 *   node --import tsx bench/core-bench.ts --events N --keys N --rules N --seed N --passes N
 *   node --import tsx bench/core-bench.ts --checkpoint-every N   also take incremental checkpoint
 *                                         parts every N events (what the service serialises)
 *
 * `npm run bench:core` gives V8 the young generation the service gives its worker threads
 * (`workerYoungGenerationMb`, 128 MB: a semi-space of a third of it, `--max-semi-space-size=43`). The partition uses the
 * service's default out-of-orderness (`--out-of-order-ms`, 1000), so events wait in the reorder
 * buffer as they do there.
 *
 * Events are encoded to bytes before timing, so each record costs what a consumed message costs the
 * runtime: decode, JSON.parse, checks, rules. Each pass uses a fresh partition. The last line of
 * output is one JSON object.
 */
import { performance } from 'node:perf_hooks';
import {
  checkpointParts,
  checkpointPartsBytes,
  createPartition,
  keyedStateCount,
  processRecord,
  type PartitionRecord,
  type PartitionState,
} from '../rules/index.js';
import { eventGenerator, generateRules } from './e2e-inputs.js';
import { exposedGc } from './gc.js';
import { ruleSetOf } from './rule-sets.js';

const argv = process.argv.slice(2);
function numberArg(name: string, fallback: number, min = 1): number {
  const i = argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const v = Number(argv[i + 1]);
  if (!Number.isSafeInteger(v) || v < min)
    throw new Error(`--${name} needs an integer of at least ${min}, got ${argv[i + 1]}`);
  return v;
}
const QUICK = argv.includes('--quick');
const EVENTS = numberArg('events', QUICK ? 50_000 : 200_000);
const KEYS = numberArg('keys', 100_000);
const RULES = numberArg('rules', 1000);
const SEED = numberArg('seed', 20261129) >>> 0;
const PASSES = numberArg('passes', QUICK ? 2 : 3);
const OUT_OF_ORDER_MS = numberArg('out-of-order-ms', 1000, 0);
/** 0: no checkpoints. */
const CHECKPOINT_EVERY = numberArg('checkpoint-every', 0, 0);

const ruleSet = ruleSetOf(generateRules(RULES, SEED));

const next = eventGenerator(SEED, KEYS);
const t0 = 1_764_400_000_000;
const records: PartitionRecord[] = [];
for (let i = 0; i < EVENTS; i++) {
  const { key, data } = next(i);
  // 2 ms apart, as the bench's fill rate stores them, so windows hold a realistic number of entries.
  records.push({ kind: 'event', seq: i + 1, key, data, publishTs: t0 + i * 2 });
}

const gc = exposedGc();
const passes: number[] = [];
let heapBytesPerState = 0;
let states = 0;
let alerts = 0;
let errors = 0;
let invalid = 0;
let checkpointSeconds = 0;
let checkpointFields = 0;
let checkpointBytes = 0;
let checkpointMetaBytes = 0;
let checkpointUtf8Bytes = 0;
let checkpoints = 0;
// The previous pass's partition, dropped before the next pass measures the heap: while a loop
// variable still held it, the heap before a pass already counted a whole partition, and passes
// after the first reported heapBytesPerState 0.
let st: PartitionState | undefined;
for (let pass = 0; pass < PASSES; pass++) {
  st = undefined;
  gc();
  const heapBefore = process.memoryUsage().heapUsed;
  st = createPartition(ruleSet, { partition: 0, outOfOrderMs: OUT_OF_ORDER_MS });
  let a = 0;
  let cpSeconds = 0;
  let cpFields = 0;
  let cpBytes = 0;
  let cpMetaBytes = 0;
  let cpCount = 0;
  let utf8Bytes = 0;
  const start = performance.now();
  for (let i = 0; i < records.length; i++) {
    const out = processRecord(st, records[i] as PartitionRecord);
    a += out.alerts.length;
    errors += out.errors.length;
    invalid += out.invalid.length;
    if (CHECKPOINT_EVERY > 0 && (i + 1) % CHECKPOINT_EVERY === 0) {
      const t = performance.now();
      const parts = checkpointParts(st);
      // The service's Redis client measures each argument's UTF-8 length before writing it, which
      // flattens a string built by concatenation: counted here too, or text left as a tree of
      // cons strings would look cheaper than it is.
      for (const [field, value] of parts.upserts)
        utf8Bytes += Buffer.byteLength(field) + Buffer.byteLength(value);
      cpSeconds += (performance.now() - t) / 1000;
      cpFields += parts.upserts.length + parts.deletes.length;
      cpBytes += checkpointPartsBytes(parts) - parts.meta.length;
      cpMetaBytes += parts.meta.length;
      cpCount++;
    }
  }
  const seconds = (performance.now() - start) / 1000;
  gc();
  states = keyedStateCount(st);
  // The partition's keyed state (and its reorder buffer, small next to it): heap per (key, rule) state.
  heapBytesPerState = Math.round(
    (process.memoryUsage().heapUsed - heapBefore) / Math.max(1, states),
  );
  checkpointSeconds = cpSeconds;
  checkpointFields = cpFields;
  checkpointBytes = cpBytes;
  checkpointMetaBytes = cpMetaBytes;
  checkpointUtf8Bytes = utf8Bytes;
  checkpoints = cpCount;
  alerts = a;
  passes.push(EVENTS / seconds);
  console.log(
    `[core-bench] pass ${pass + 1}: ${Math.round(EVENTS / seconds)} events/s, ${a} alerts`,
  );
}
const best = Math.max(...passes);
console.log(
  JSON.stringify({
    bench: 'core',
    events: EVENTS,
    keys: KEYS,
    rules: RULES,
    seed: SEED,
    eventsPerSec: Math.round(best),
    meanEventsPerSec: Math.round(passes.reduce((x, y) => x + y, 0) / passes.length),
    microsPerEvent: Math.round((1e6 / best) * 100) / 100,
    alertsPerPass: alerts,
    keyedStates: states,
    heapBytesPerState,
    errors,
    invalid,
    ...(CHECKPOINT_EVERY > 0
      ? {
          checkpointEvery: CHECKPOINT_EVERY,
          checkpointShareOfTime:
            Math.round((checkpointSeconds / (EVENTS / passes[passes.length - 1]!)) * 1000) / 1000,
          checkpointFieldsPerPass: checkpointFields,
          checkpointMicrosPerField:
            Math.round((checkpointSeconds / Math.max(1, checkpointFields)) * 1e8) / 100,
          checkpointBytesPerField: Math.round(checkpointBytes / Math.max(1, checkpointFields)),
          checkpointUtf8BytesPerField: Math.round(
            checkpointUtf8Bytes / Math.max(1, checkpointFields),
          ),
          checkpointMetaBytesPerCheckpoint: Math.round(
            checkpointMetaBytes / Math.max(1, checkpoints),
          ),
          checkpointKeyBytesPerCheckpoint: Math.round(checkpointBytes / Math.max(1, checkpoints)),
        }
      : {}),
  }),
);
