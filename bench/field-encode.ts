/**
 * What a checkpoint field costs to write: the e2e rule mix and events through one partition, then
 * every key's field (`encodeKeyStates`, the text a checkpoint stores per changed key) written
 * `--rounds` times. Under load nearly every event dirties a key the last checkpoint did not write,
 * so this is a cost per event (bench/README.md).
 *
 *   node --max-semi-space-size=43 --import tsx bench/field-encode.ts
 *   node --max-semi-space-size=43 --import tsx bench/field-encode.ts --events N --keys N --rounds N
 *
 * The last line is one JSON object: `microsPerFieldMin` and `…Median` over the rounds,
 * `bytesPerField` (UTF-16 code units, the text's length).
 */
import { applyControl, createPartition, emptyRuleSet, processRecord } from '../rules/index.js';
import { encodeKeyStates } from '../rules/key-state-json.js';
import { eventGenerator, generateRules } from './e2e-inputs.js';
import { positiveArg } from './positive-arg.js';
import { round } from './round.js';

const EVENTS = positiveArg('events', 200_000);
const KEYS = positiveArg('keys', 100_000);
const ROUNDS = positiveArg('rounds', 7);
const SEED = 20261129;

const applied = applyControl(
  emptyRuleSet(),
  { op: 'replace-all', rules: generateRules(1000, SEED) },
  1,
);
if (!applied.ok) throw new Error('the benchmark rules were refused');
const st = createPartition(applied.ruleSet, { partition: 0, outOfOrderMs: 100 });
const next = eventGenerator(SEED, KEYS);
for (let i = 0; i < EVENTS; i++) {
  const { key, data } = next(i);
  processRecord(st, {
    kind: 'event',
    seq: i + 1,
    key,
    data,
    publishTs: 1_000_000 + Math.floor(i / 13),
  });
}
const keys = [...st.states.keys()];
const perField: number[] = [];
let chars = 0;
for (let r = 0; r < ROUNDS; r++) {
  chars = 0;
  const t0 = performance.now();
  for (const key of keys)
    chars += encodeKeyStates(
      st.states.statesOf(st.states.keyNumber(key)),
      st.lineageIndex,
      st.windows,
    ).length;
  perField.push(((performance.now() - t0) * 1000) / keys.length);
}
perField.sort((a, b) => a - b);
console.log(
  JSON.stringify({
    bench: 'field-encode',
    events: EVENTS,
    keys: KEYS,
    fields: keys.length,
    rounds: ROUNDS,
    microsPerFieldMin: round(perField[0] as number, 2),
    microsPerFieldMedian: round(perField[Math.floor(ROUNDS / 2)] as number, 2),
    bytesPerField: Math.round(chars / keys.length),
  }),
);
