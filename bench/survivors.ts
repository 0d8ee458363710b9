/**
 * What outlives a young-generation collection in a worker's rules core: the e2e rules and events
 * through `processRecord` in one thread, with event time moving as in `bench:e2e`'s (c) (13 events
 * a millisecond), a sampling heap profile over a window of events after a warm-up. The profile
 * keeps the sampled objects that are still alive when it is read, so what it lists is what the
 * window's events made and something still holds: what a scavenge would copy.
 *
 *   node --max-semi-space-size=43 --import tsx bench/survivors.ts
 *   node --max-semi-space-size=43 --import tsx bench/survivors.ts --warm N --window N --out-of-order-ms N
 *
 * Prints bytes an event by allocating function (and by its last three frames), named as in the
 * sources (the code tsx runs gives no useful line numbers). The last line is one JSON object.
 */
import { Session } from 'node:inspector/promises';
import { createPartition, processRecord, type PartitionRecord } from '../rules/index.js';
import { eventGenerator, generateRules } from './e2e-inputs.js';
import { positiveArg } from './positive-arg.js';
import { ruleSetOf } from './rule-sets.js';

const WARM = positiveArg('warm', 2_000_000);
const WINDOW = positiveArg('window', 20_000);
const OUT_OF_ORDER_MS = positiveArg('out-of-order-ms', 1000);
const SEED = 20261129;

interface ProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: ProfileNode[];
}

const st = createPartition(ruleSetOf(generateRules(1000, SEED)), {
  partition: 0,
  outOfOrderMs: OUT_OF_ORDER_MS,
});
const next = eventGenerator(SEED, 100_000);
const t0 = 1_764_400_000_000;
let seq = 0;
function feed(n: number): void {
  for (let i = 0; i < n; i++) {
    const { key, data } = next(seq);
    seq++;
    const record: PartitionRecord = {
      kind: 'event',
      seq,
      key,
      data,
      publishTs: t0 + Math.floor(seq / 13),
    };
    processRecord(st, record);
  }
}
feed(WARM);
const session = new Session();
session.connect();
await session.post('HeapProfiler.enable');
await session.post('HeapProfiler.startSampling', { samplingInterval: 256 });
feed(WINDOW);
const { profile } = (await session.post('HeapProfiler.getSamplingProfile')) as {
  profile: { head: ProfileNode };
};
await session.post('HeapProfiler.stopSampling');
session.disconnect();

const bySelf = new Map<string, number>();
const byStack = new Map<string, number>();
(function walk(node: ProfileNode, path: readonly string[]): void {
  const f = node.callFrame;
  const name = `${f.functionName || '(anonymous)'} ${f.url.split('/').slice(-2).join('/')}:${f.lineNumber + 1}`;
  const here = [...path, name];
  if (node.selfSize > 0) {
    bySelf.set(name, (bySelf.get(name) ?? 0) + node.selfSize);
    const stack = here.slice(-3).join(' < ');
    byStack.set(stack, (byStack.get(stack) ?? 0) + node.selfSize);
  }
  for (const c of node.children) walk(c, here);
})(profile.head, []);

const perEvent = (bytes: number): string => (bytes / WINDOW).toFixed(1).padStart(7);
const total = [...bySelf.values()].reduce((a, b) => a + b, 0);
console.log(
  `[survivors] still alive of what ${WINDOW} events made after ${WARM}: ${perEvent(total).trim()} bytes an event`,
);
for (const [name, bytes] of [...bySelf].sort((a, b) => b[1] - a[1]).slice(0, 15))
  console.log(`${perEvent(bytes)} B  ${name}`);
console.log('[survivors] by the last three frames:');
for (const [stack, bytes] of [...byStack].sort((a, b) => b[1] - a[1]).slice(0, 15))
  console.log(`${perEvent(bytes)} B  ${stack}`);
console.log(
  JSON.stringify({
    bench: 'survivors',
    warm: WARM,
    window: WINDOW,
    outOfOrderMs: OUT_OF_ORDER_MS,
    bytesPerEvent: Math.round(total / WINDOW),
  }),
);
