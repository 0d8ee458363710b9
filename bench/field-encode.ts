/**
 * What a checkpoint field costs to write and to read: the e2e rule mix and events through one
 * partition, then every key's field (`encodeField`, what a checkpoint stores per changed key)
 * written `--rounds` times, and read back (`decodeField`, what a restored partition does when it
 * first touches a key) as often. Under load nearly every event dirties a key the last checkpoint
 * did not write, so writing is a cost per event (bench/README.md).
 *
 *   node --max-semi-space-size=43 --import tsx bench/field-encode.ts
 *   node --max-semi-space-size=43 --import tsx bench/field-encode.ts --events N --keys N --rounds N
 *
 * The last line is one JSON object: `microsPerFieldMin` and `…Median` (writing) and
 * `microsPerDecodeMin` and `…Median` (reading) over the rounds, and `bytesPerField` (the
 * field's length: its symbols are one byte each in Redis).
 */
import { applyControl, createPartition, emptyRuleSet, processRecord } from '../rules/index.js';
import { decodeField, encodeField } from '../rules/checkpoint-field.js';
import { WindowArena } from '../rules/cep/small-window.js';
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
const perDecode: number[] = [];
let chars = 0;
const texts: string[] = [];
for (let r = 0; r < ROUNDS; r++) {
  chars = 0;
  const t0 = performance.now();
  for (let i = 0; i < keys.length; i++) {
    const text = encodeField(
      st.states.statesOf(st.states.keyNumber(keys[i] as string)),
      st.lineageIndex,
      st.windows,
    );
    chars += text.length;
    texts[i] = text;
  }
  perField.push(((performance.now() - t0) * 1000) / keys.length);
}
const nameOf = (n: number) => st.lineageIndex.nameOf(n);
for (let r = 0; r < ROUNDS; r++) {
  const arena = new WindowArena();
  const t0 = performance.now();
  for (let i = 0; i < keys.length; i++)
    decodeField(keys[i] as string, texts[i] as string, arena, nameOf);
  perDecode.push(((performance.now() - t0) * 1000) / keys.length);
}
perDecode.sort((a, b) => a - b);
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
    microsPerDecodeMin: round(perDecode[0] as number, 2),
    microsPerDecodeMedian: round(perDecode[Math.floor(ROUNDS / 2)] as number, 2),
    bytesPerField: Math.round(chars / keys.length),
  }),
);
