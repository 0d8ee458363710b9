/**
 * What keyed state costs in memory, and to snapshot and restore, at a large key count: the
 * end-to-end benchmark's rule mix (1,000 rules) and events over `--keys` keys, through the rules
 * core in one thread (no NATS, no Redis). Events come close together in event time (20 a
 * millisecond), so no window ends and nothing expires while the state fills.
 *
 *   npm run bench:state                       1,000,000 keys, 2 events a key on average
 *   npm run bench:state -- --keys N --events-per-key N --rules N --seed N
 *
 * Reported: (key, rule) states held, bytes of memory per state (V8 heap plus array buffers, which
 * is where typed-array state would live), process RSS per key that holds state, and the time to take a full
 * checkpoint of it (`checkpointParts`), to restore it (`restorePartitionParts`: keys listed, not
 * decoded) and to decode every key after that. The last line of output is one JSON object.
 */
import { performance } from 'node:perf_hooks';
import {
  checkpointParts,
  createPartition,
  keyedStateCount,
  processRecord,
  restorePartitionParts,
  writeCheckpointParts,
  type RuleSet,
} from '../rules/index.js';
import { eventGenerator, generateRules } from './e2e-inputs.js';
import { exposedGc } from './gc.js';
import { positiveArg } from './positive-arg.js';
import { round } from './round.js';
import { ruleSetOf } from './rule-sets.js';

const KEYS = positiveArg('keys', 1_000_000);
const EVENTS_PER_KEY = positiveArg('events-per-key', 2);
const RULES = positiveArg('rules', 1000);
const SEED = positiveArg('seed', 20261129) >>> 0;
const EVENTS = KEYS * EVENTS_PER_KEY;
const OPTIONS = { partition: 0, outOfOrderMs: 1000 };
const MB = 1024 * 1024;

const gc = exposedGc();
const ruleSet: RuleSet = ruleSetOf(generateRules(RULES, SEED));
const next = eventGenerator(SEED, KEYS);
const t0 = 1_764_400_000_000;

/** Heap and array buffers in use, after a full collection. */
function used(): { heap: number; buffers: number; rss: number } {
  gc();
  const m = process.memoryUsage();
  return { heap: m.heapUsed, buffers: m.arrayBuffers, rss: m.rss };
}

const before = used();
let st = createPartition(ruleSet, OPTIONS);
const feedStart = performance.now();
let alerts = 0;
for (let i = 0; i < EVENTS; i++) {
  const { key, data } = next(i);
  const ts = t0 + Math.floor(i / 20);
  alerts += processRecord(st, { kind: 'event', seq: i + 1, key, data, publishTs: ts }).alerts
    .length;
  if ((i + 1) % 500_000 === 0) console.log(`[state-bench] ${i + 1} events`);
}
// A tick past the out-of-orderness releases the events still in the reorder buffer.
processRecord(st, {
  kind: 'tick',
  seq: EVENTS + 1,
  ts: t0 + Math.floor(EVENTS / 20) + OPTIONS.outOfOrderMs + 1,
});
const feedSeconds = (performance.now() - feedStart) / 1000;
const states = keyedStateCount(st);
const keys = st.states.size;
const after = used();
const heapBytes = after.heap - before.heap;
const bufferBytes = after.buffers - before.buffers;
console.log(
  `[state-bench] ${keys} keys, ${states} states: heap ${(heapBytes / MB).toFixed(1)} MB, buffers ${(bufferBytes / MB).toFixed(1)} MB, RSS ${(after.rss / MB).toFixed(1)} MB`,
);

let t = performance.now();
const parts = checkpointParts(st, true);
const snapshotSeconds = (performance.now() - t) / 1000;
let snapshotBytes = parts.meta.length;
for (const [f, v] of parts.upserts) snapshotBytes += Buffer.byteLength(f) + Buffer.byteLength(v);
const hashes = { fields: new Map<string, string>(), buffered: new Map(), lineages: new Map() };
writeCheckpointParts(hashes, parts);
const meta = parts.meta;
// The live partition goes: the restored one is measured alone.
st = createPartition(ruleSet, OPTIONS);
gc();

t = performance.now();
const restored = restorePartitionParts(
  { meta, fields: hashes.fields, buffered: hashes.buffered, lineages: hashes.lineages },
  (seq) => (seq === ruleSet.controlSeq ? ruleSet : undefined),
  { outOfOrderMs: OPTIONS.outOfOrderMs },
);
const restoreSeconds = (performance.now() - t) / 1000;
t = performance.now();
const restoredStates = keyedStateCount(restored);
const decodeSeconds = (performance.now() - t) / 1000;
if (restoredStates !== states)
  throw new Error(`restored ${restoredStates} states, the live partition held ${states}`);

console.log(
  JSON.stringify({
    bench: 'state',
    keys: KEYS,
    // Keys that met a rule with keyed state (the others' events met none that keeps any).
    keysWithState: keys,
    rules: RULES,
    events: EVENTS,
    seed: SEED,
    keyedStates: states,
    statesPerKey: round(states / Math.max(1, keys), 1),
    alerts,
    feedEventsPerSec: Math.round(EVENTS / feedSeconds),
    heapMb: round(heapBytes / MB, 1),
    arrayBufferMb: round(bufferBytes / MB, 1),
    bytesPerState: Math.round((heapBytes + bufferBytes) / Math.max(1, states)),
    rssMb: round(after.rss / MB, 1),
    rssBytesPerKeyWithState: Math.round((after.rss - before.rss) / Math.max(1, keys)),
    snapshotSeconds: round(snapshotSeconds, 2),
    snapshotMb: round(snapshotBytes / MB, 1),
    restoreSeconds: round(restoreSeconds, 2),
    decodeAllSeconds: round(decodeSeconds, 2),
  }),
);
