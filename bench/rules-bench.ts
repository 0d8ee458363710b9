/**
 * Rules benchmark: json-rules-engine (the reference) against Vigil's compiled evaluator and the
 * full partition pipeline, at 10, 100 and 1,000 rules, plus a sliding-window benchmark over
 * 100,000 keys. Deterministic inputs (seeded PRNG); see bench/README.md for what each figure means.
 *
 *   npm run bench:rules              full run (a few minutes on 2 cores)
 *   npm run bench:rules -- --quick   smoke run: fewer events, shorter time budgets
 *   npm run bench:rules -- --seed=7  other inputs
 *
 * The last line of output is one JSON object with every figure.
 */
import { Engine, type RuleProperties, type TopLevelCondition } from 'json-rules-engine';
import { prng } from '../test/prng.js';
import {
  amount,
  bigAmountWhen,
  cardTestingWhen,
  CHANNELS,
  CHANNEL_WEIGHTS,
  COUNTRIES,
  COUNTRY_WEIGHTS,
  countries,
  EVENT_TYPES,
  foreignAmountWhen,
  int,
  leaf,
  mccs,
  MCCS,
  pick,
  weighted,
  type Rand,
} from './e2e-inputs.js';
import { exposedGc } from './gc.js';
import { ruleSetOf, velocityRule } from './rule-sets.js';
import { performance } from 'node:perf_hooks';
import {
  createPartition,
  evalContext,
  processRecord,
  keyedStateCount,
  snapshotPartition,
  type Rule,
  type RuleSet,
  type TopCondition,
} from '../rules/index.js';

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

const argv = process.argv.slice(2);
const QUICK = argv.includes('--quick');
const SEED =
  Number(argv.find((a) => a.startsWith('--seed='))?.slice('--seed='.length) ?? 20261129) >>> 0;

const SIZES = [10, 100, 1000] as const;
const CONFIG = QUICK
  ? {
      events: 2_000,
      jreBudgetMs: 500,
      minTimedMs: 200,
      minPasses: 2,
      windowKeys: 10_000,
      eventsPerKey: 10,
    }
  : {
      events: 20_000,
      jreBudgetMs: 2_500,
      minTimedMs: 1_000,
      minPasses: 3,
      windowKeys: 100_000,
      eventsPerKey: 10,
    };

/** Event time of the first generated event: 2026-11-29T00:00:00Z. */
const T0 = Date.UTC(2026, 10, 29);

// ---------------------------------------------------------------------------------------------
// Deterministic inputs
// ---------------------------------------------------------------------------------------------

const mulberry32 = prng;

const AMOUNT_THRESHOLDS = [25, 50, 100, 200, 500, 1000, 2000, 5000] as const;

/**
 * One rule of a realistic fraud rule set: an amount threshold, a country list and an any-of on
 * channel or merchant category, in a few shapes (templates A-E), on exactly one event type.
 */
function generateRule(rand: Rand, i: number): Rule {
  const type = pick(rand, EVENT_TYPES);
  const r = rand();
  let when: TopCondition;
  if (r < 0.6) {
    // A: big amount from a risky country through a risky channel or merchant category.
    when = bigAmountWhen(rand, AMOUNT_THRESHOLDS, [3, 12], [2, 12]);
  } else if (r < 0.75) {
    // B: amount outside the usual countries on some channels.
    when = foreignAmountWhen(rand, AMOUNT_THRESHOLDS);
  } else if (r < 0.85) {
    // C: very big amount anywhere, or a risky country and merchant category.
    when = {
      any: [
        leaf('amount', 'greaterThan', pick(rand, [2000, 5000, 10000])),
        {
          all: [leaf('country', 'in', countries(rand, 2, 6)), leaf('mcc', 'in', mccs(rand, 2, 6))],
        },
      ],
    };
  } else if (r < 0.95) {
    // D: card testing: tiny amounts online, outside home countries.
    when = cardTestingWhen(rand, [1, 2, 5, 10]);
  } else {
    // E: high-risk merchant categories (a long list: compiled to a set lookup).
    when = {
      all: [
        leaf('amount', 'greaterThan', pick(rand, AMOUNT_THRESHOLDS)),
        leaf('mcc', 'in', mccs(rand, 10, 16)),
        {
          any: [
            leaf('channel', 'notEqual', 'pos'),
            leaf('country', 'equal', pick(rand, COUNTRIES)),
          ],
        },
      ],
    };
  }
  const id = `rule-${String(i).padStart(4, '0')}`;
  return {
    id,
    description: `benchmark rule ${i} (${type})`,
    on: [type],
    when,
    alert: {
      severity: pick(rand, ['low', 'medium', 'high']),
      title: '{{type}} of {{amount}} from {{country}} ({{ruleId}})',
    },
  };
}

/** A payment-like event, as the partition receives it after JSON parsing. */
type BenchEvent = {
  id: string;
  type: string;
  ts: number;
  cardId: string;
  userId: string;
  amount?: number | string | null;
  currency: string;
  country?: string | null;
  channel: string;
  mcc?: string;
  deviceId: string;
  ip: string;
};

/**
 * `n` events, 180 ms apart, over 5,000 cards. About 1% carry the amount as a numeric string and
 * 1% a null country, and 3% have no `mcc`: the quirks real feeds have, which both engines must
 * judge alike.
 */
function generateEvents(rand: Rand, n: number): BenchEvent[] {
  const events: BenchEvent[] = [];
  for (let i = 0; i < n; i++) {
    const card = int(rand, 0, 4999);
    const amt = amount(rand);
    const e: BenchEvent = {
      id: `evt-${i}`,
      type: pick(rand, EVENT_TYPES),
      ts: T0 + i * 180,
      cardId: `card-${card}`,
      userId: `user-${card >> 1}`,
      amount: amt,
      currency: pick(rand, ['USD', 'EUR', 'GBP']),
      country: weighted(rand, COUNTRIES, COUNTRY_WEIGHTS),
      channel: weighted(rand, CHANNELS, CHANNEL_WEIGHTS),
      mcc: pick(rand, MCCS),
      deviceId: `dev-${int(rand, 0, 9999)}`,
      ip: `10.${int(rand, 0, 255)}.${int(rand, 0, 255)}.${int(rand, 1, 254)}`,
    };
    const quirk = rand();
    if (quirk < 0.01) e.amount = amt.toFixed(2);
    else if (quirk < 0.02) e.country = null;
    else if (quirk < 0.05) delete e.mcc;
    events.push(e);
  }
  return events;
}

// ---------------------------------------------------------------------------------------------
// Engines
// ---------------------------------------------------------------------------------------------

/** The rule as a json-rules-engine user writes it: the type filter becomes a condition. */
function jreRule(rule: Rule): RuleProperties {
  const type = rule.on[0] as string;
  const conditions = {
    all: [{ fact: 'type', operator: 'equal', value: type }, structuredClone(rule.when)],
  };
  return { conditions: conditions as unknown as TopLevelCondition, event: { type: rule.id } };
}

function newEngine(rules: readonly Rule[]): Engine {
  const engine = new Engine([], { allowUndefinedFacts: true });
  for (const r of rules) engine.addRule(jreRule(r));
  return engine;
}

const ERROR = '!error';

/** json-rules-engine's verdict: the sorted ids of the rules it fired, or `!error` when the run rejects. */
async function jreVerdict(engine: Engine, event: BenchEvent): Promise<string> {
  try {
    const { events } = await engine.run(event);
    return events
      .map((e) => e.type)
      .sort()
      .join(',');
  } catch {
    return ERROR;
  }
}

/** The compiled evaluator's verdict, in the same form. `rulesFor` lists rules in id order. */
function compiledVerdict(rs: RuleSet, event: BenchEvent): string {
  const ctx = evalContext(event, rs.models);
  const fired: string[] = [];
  try {
    for (const rule of rs.rulesFor(event.type))
      if (rule.when === undefined || rule.when(ctx)) fired.push(rule.id);
  } catch {
    return ERROR;
  }
  return fired.join(',');
}

// ---------------------------------------------------------------------------------------------
// Measurements
// ---------------------------------------------------------------------------------------------

const now = (): number => performance.now();
const round = (x: number, digits = 0): number => Math.round(x * 10 ** digits) / 10 ** digits;
const fmt = (x: number): string => Math.round(x).toLocaleString('en-US');

interface Timed {
  readonly best: number;
  readonly mean: number;
  readonly passes: number;
}

/** Runs `pass` (one pass over `n` events) until at least `minMs` and `minPasses` passes; events/s of the best pass and the mean. */
function timePasses(n: number, pass: () => number, sink: { v: number }): Timed {
  let passes = 0;
  let total = 0;
  let best = Infinity;
  while (passes < CONFIG.minPasses || total < CONFIG.minTimedMs) {
    const t = now();
    sink.v += pass();
    const dt = now() - t;
    best = Math.min(best, dt);
    total += dt;
    passes++;
  }
  return { best: (n * 1000) / best, mean: (n * passes * 1000) / total, passes };
}

interface SizeResult {
  rules: number;
  jreEventsPerSec: number;
  jreEventsTimed: number;
  compiledEventsPerSec: number;
  compiledMeanEventsPerSec: number;
  compiledPasses: number;
  pipelineEventsPerSec: number;
  pipelineMeanEventsPerSec: number;
  pipelinePasses: number;
  ratio: number;
  pipelineRatio: number;
  disagreements: number;
  disagreementsJrePrefix: number;
  pipelineDisagreements: number;
  jrePerTypeEventsPerSec: number;
  rulesPerEvent: number;
  firedPerEvent: number;
  rulesEverFired: number;
  alerts: number;
}

async function benchSize(
  allRules: readonly Rule[],
  size: number,
  events: readonly BenchEvent[],
): Promise<SizeResult> {
  const rules = allRules.slice(0, size);
  const rs = ruleSetOf(rules);
  const sink = { v: 0 };
  console.log(`\n== ${size} rules over ${new Set(rules.map((r) => r.on[0])).size} event types ==`);

  // Compiled verdicts for every event (also warms the compiled code up).
  const compiled = events.map((e) => compiledVerdict(rs, e));
  let applicable = 0;
  let fired = 0;
  const everFired = new Set<string>();
  for (let i = 0; i < events.length; i++) {
    applicable += rs.rulesFor((events[i] as BenchEvent).type).length;
    const v = compiled[i] as string;
    if (v === '' || v === ERROR) continue;
    for (const id of v.split(',')) everFired.add(id);
    fired += v.split(',').length;
  }
  console.log(
    `rules per event ${round(applicable / events.length, 2)} (${round((100 * applicable) / events.length / size, 1)}% of rules), ` +
      `fired per event ${round(fired / events.length, 3)}, rules that ever fired ${everFired.size}/${size}`,
  );

  // Disagreements over every event: one engine per event type (same verdicts as one engine, much faster).
  const byType = new Map<string, Engine>();
  for (const t of EVENT_TYPES) byType.set(t, newEngine(rules.filter((r) => r.on[0] === t)));
  let disagreements = 0;
  const examples: string[] = [];
  const t0 = now();
  for (let i = 0; i < events.length; i++) {
    const e = events[i] as BenchEvent;
    const v = await jreVerdict(byType.get(e.type) as Engine, e);
    if (v !== compiled[i]) {
      disagreements++;
      if (examples.length < 5)
        examples.push(
          `  event #${i} ${JSON.stringify(e)}: json-rules-engine [${v}] vs compiled [${compiled[i]}]`,
        );
    }
  }
  const jrePerType = (events.length * 1000) / (now() - t0);
  console.log(
    `disagreements (per-type json-rules-engine, all ${events.length} events): ${disagreements} at ${fmt(jrePerType)} ev/s`,
  );
  for (const x of examples) console.log(x);

  // json-rules-engine as a user would run it: one engine, every rule, sequentially, on a prefix.
  const engine = newEngine(rules);
  for (let i = 0; i < Math.min(20, events.length); i++) await engine.run(events[i] as BenchEvent); // warm-up
  let timed = 0;
  let prefixDisagreements = 0;
  const t1 = now();
  let elapsed = 0;
  while (timed < events.length && elapsed < CONFIG.jreBudgetMs) {
    const e = events[timed] as BenchEvent;
    const { events: out } = await engine.run(e);
    const v = out
      .map((x) => x.type)
      .sort()
      .join(',');
    if (v !== compiled[timed]) prefixDisagreements++;
    timed++;
    elapsed = now() - t1;
  }
  const jreEventsPerSec = (timed * 1000) / elapsed;
  console.log(
    `json-rules-engine (one engine):  ${fmt(jreEventsPerSec).padStart(12)} ev/s over ${timed} events (${prefixDisagreements} disagreements)`,
  );

  // The compiled evaluator: type index, then each applicable rule's compiled `when`.
  const models = rs.models;
  const compiledPass = (): number => {
    let n = 0;
    for (const e of events) {
      const ctx = evalContext(e, models);
      const ids: string[] = [];
      for (const rule of rs.rulesFor(e.type))
        if (rule.when === undefined || rule.when(ctx)) ids.push(rule.id);
      n += ids.length;
    }
    return n;
  };
  const c = timePasses(events.length, compiledPass, sink);
  console.log(
    `compiled evaluator:              ${fmt(c.best).padStart(12)} ev/s (best of ${c.passes} passes over ${events.length} events; mean ${fmt(c.mean)})`,
  );

  // The full runtime entry point: parse, type index, judge, alert.
  let pipelineDisagreements = 0;
  let alerts = 0;
  {
    const st = createPartition(rs, { partition: 0 });
    for (let i = 0; i < events.length; i++) {
      const e = events[i] as BenchEvent;
      const out = processRecord(st, {
        kind: 'event',
        seq: i + 1,
        key: e.cardId,
        data: e,
        publishTs: e.ts,
      });
      if (out.late.length + out.invalid.length + out.errors.length > 0)
        throw new Error(`event #${i} was late, invalid or failed: ${JSON.stringify(out)}`);
      alerts += out.alerts.length;
      const v = out.alerts
        .map((a) => a.ruleId)
        .sort()
        .join(',');
      if (v !== compiled[i]) pipelineDisagreements++;
    }
  }
  const pipelinePass = (): number => {
    const st = createPartition(rs, { partition: 0 });
    let n = 0;
    for (let i = 0; i < events.length; i++) {
      const e = events[i] as BenchEvent;
      n += processRecord(st, { kind: 'event', seq: i + 1, key: e.cardId, data: e, publishTs: e.ts })
        .alerts.length;
    }
    return n;
  };
  const p = timePasses(events.length, pipelinePass, sink);
  console.log(
    `pipeline (processRecord):        ${fmt(p.best).padStart(12)} ev/s (best of ${p.passes} passes; mean ${fmt(p.mean)}; ${alerts} alerts, ${pipelineDisagreements} disagreements)`,
  );
  const ratio = c.best / jreEventsPerSec;
  console.log(
    `compiled / json-rules-engine: ${round(ratio, 1)}x; pipeline / json-rules-engine: ${round(p.best / jreEventsPerSec, 1)}x`,
  );

  return {
    rules: size,
    jreEventsPerSec: round(jreEventsPerSec, 1),
    jreEventsTimed: timed,
    compiledEventsPerSec: Math.round(c.best),
    compiledMeanEventsPerSec: Math.round(c.mean),
    compiledPasses: c.passes,
    pipelineEventsPerSec: Math.round(p.best),
    pipelineMeanEventsPerSec: Math.round(p.mean),
    pipelinePasses: p.passes,
    ratio: round(ratio, 1),
    pipelineRatio: round(p.best / jreEventsPerSec, 1),
    disagreements,
    disagreementsJrePrefix: prefixDisagreements,
    pipelineDisagreements,
    jrePerTypeEventsPerSec: round(jrePerType, 1),
    rulesPerEvent: round(applicable / events.length, 2),
    firedPerEvent: round(fired / events.length, 3),
    rulesEverFired: everFired.size,
    alerts,
  };
}

interface WindowResult {
  keys: number;
  events: number;
  eventsPerSec: number;
  bytesPerKey: number;
  snapshotBytesPerKey: number;
  alerts: number;
  keysWithState: number;
}

/**
 * One sliding-window sum rule over `keys` cards, each getting `perKey` events within one hour
 * (every round visits every key once, in a fresh random order), fed through `processRecord`.
 */
function benchWindow(rand: Rand, keys: number, perKey: number): WindowResult {
  const gc = exposedGc();
  const rs = ruleSetOf([{ ...velocityRule(10000), key: 'cardId' }]);
  const n = keys * perKey;
  // Inputs as compact arrays, so that the heap measured below holds only the partition's state.
  const order = new Int32Array(n);
  const amounts = new Float64Array(n);
  const perm = Int32Array.from({ length: keys }, (_, i) => i);
  for (let round = 0; round < perKey; round++) {
    for (let i = keys - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      const x = perm[i] as number;
      perm[i] = perm[j] as number;
      perm[j] = x;
    }
    order.set(perm, round * keys);
  }
  for (let i = 0; i < n; i++) amounts[i] = amount(rand);
  const span = 3_600_000 - 1; // every event of the run falls within one hour
  console.log(`\n== window: sliding sum over 1h, ${fmt(keys)} keys, ${fmt(n)} events ==`);

  const st = createPartition(rs, { partition: 0 });
  gc();
  gc();
  const before = process.memoryUsage().heapUsed;
  let alerts = 0;
  const t = now();
  for (let i = 0; i < n; i++) {
    const ts = T0 + Math.floor((i * span) / n);
    const cardId = `card-${order[i] as number}`;
    const event = { type: 'payment', ts, cardId, amount: amounts[i] as number };
    alerts += processRecord(st, {
      kind: 'event',
      seq: i + 1,
      key: cardId,
      data: event,
      publishTs: ts,
    }).alerts.length;
  }
  const dt = now() - t;
  gc();
  gc();
  const after = process.memoryUsage().heapUsed;
  const keysWithState = keyedStateCount(st);
  const snapshotBytes = snapshotPartition(st).byteLength;
  const result: WindowResult = {
    keys,
    events: n,
    eventsPerSec: Math.round((n * 1000) / dt),
    bytesPerKey: Math.round((after - before) / keys),
    snapshotBytesPerKey: round(snapshotBytes / keys, 1),
    alerts,
    keysWithState,
  };
  console.log(
    `${fmt(result.eventsPerSec)} ev/s; heap ${fmt(after - before)} bytes = ${result.bytesPerKey} bytes/key; snapshot ${fmt(snapshotBytes)} bytes = ${result.snapshotBytesPerKey} bytes/key; ${alerts} alerts; ${fmt(keysWithState)} keys with state`,
  );
  return result;
}

async function main(): Promise<void> {
  const started = now();
  console.log(
    `rules bench${QUICK ? ' (quick)' : ''}: seed ${SEED}, ${CONFIG.events} events, sizes ${SIZES.join(', ')}, node ${process.version}`,
  );
  const rand = mulberry32(SEED);
  const allRules = Array.from({ length: Math.max(...SIZES) }, (_, i) => generateRule(rand, i));
  const events = generateEvents(rand, CONFIG.events);
  const sizes: SizeResult[] = [];
  for (const size of SIZES) sizes.push(await benchSize(allRules, size, events));
  const window = benchWindow(rand, CONFIG.windowKeys, CONFIG.eventsPerKey);
  const seconds = round((now() - started) / 1000, 1);
  console.log(`\ndone in ${seconds} s`);
  console.log(
    JSON.stringify({
      bench: 'rules',
      quick: QUICK,
      seed: SEED,
      events: CONFIG.events,
      compiledStat: 'best pass',
      node: process.version,
      sizes,
      window,
      seconds,
    }),
  );
}

await main();
