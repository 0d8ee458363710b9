import { afterEach, describe, expect, it } from 'vitest';
import { hopPayload, rekeySubject } from '../../protocol/index.js';
import type { HopMessage, Rule } from '../../rules/index.js';
import { P, PARTITIONS, settle, setup, stopRunners, upsert } from './partition-runner-fixture.js';

afterEach(stopRunners);

const SPACE = 'b';
/** Fires on every payment of a beneficiary (a pattern: it waits for the watermark). */
const fan: Rule = {
  id: 'fan',
  on: ['pay'],
  key: SPACE,
  pattern: { kind: 'threshold', aggregate: 'count', window: '10s', operator: '>=', value: 1 },
};

describe('PartitionRunner downstream of the re-keying hop', () => {
  it('judges the first message of a newer numbering under the rule set it names', async () => {
    const t = await setup({ control: [upsert(fan)], downstream: SPACE });
    t.runner.start();
    const send = (src: number, m: HopMessage) =>
      t.source.push(rekeySubject(SPACE, P), hopPayload(src, m), 1000);
    const forward = (src: number, origin: number, n: number, id: string, ts: number) =>
      send(src, {
        kind: 'forward',
        space: SPACE,
        partition: P,
        origin,
        n,
        srcSeq: ts,
        controlSeq: 1,
        watermark: ts - 1,
        key: 'x',
        ts,
        publishTs: ts,
        text: JSON.stringify({ type: 'pay', b: 'x', id, ts }),
      });
    const report = (src: number, origin: number, n: number, watermark: number, horizon: number) =>
      send(src, {
        kind: 'report',
        space: SPACE,
        partition: P,
        origin,
        n,
        controlSeq: 1,
        watermark,
        horizon,
      });
    forward(0, 0, 1, 'before', 1000);
    report(0, 0, 2, 1500, 1000);
    // Source 0 numbers anew from offset 50 (the hop was off there): its message 1 is its turn,
    // though the partition expects message 3 of the old numbering; nothing is in force here yet.
    forward(0, 50, 1, 'after', 2000);
    // What is left of the old numbering is stale.
    forward(0, 0, 3, 'stale', 2500);
    for (let src = 1; src < PARTITIONS; src++) report(src, 0, 1, 20_000, 0);
    report(0, 50, 2, 20_000, 2000);
    await t.source.drained();
    await settle();
    expect(t.fired().sort()).toEqual(['fan:after', 'fan:before']);
    expect(t.dead.published).toEqual([]);
    const counted: Record<string, number> = {};
    for (const v of (await t.metrics.events.get()).values)
      if (v.labels.partition === `${P}~${SPACE}`) counted[String(v.labels.outcome)] = v.value;
    expect(counted).toEqual({ forward: 2, duplicate: 1, report: 5 });
  });
});
