import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  applyControl,
  checkpointParts,
  checkpointRuleSets,
  createPartition,
  explainRule,
  SourceHop,
  keyedStateCount,
  keySpaceOf,
  processRecord,
  restorePartitionParts,
  sourceHorizon,
  stateLineages,
  type Alert,
  type PartitionRecord,
  type PartitionState,
  type ProcessResult,
  type RuleSet,
} from '../../rules/index.js';
import { memoryStore, ruleSetOf, writeParts } from './harness.js';
import {
  runDownstream,
  runSources,
  withGap,
  withReplay,
  type Crash,
  type SourceRun,
} from './hop.js';
import { downstreamRecord, partitionOf } from '../../protocol/index.js';
import { rules as baseRules, step, toRecords, type Step } from './random-logs.js';

/**
 * The re-keying hop, pure: sources forward the events of rules keyed by other fields than the
 * partition key (`acct`), and each downstream partition must give the same alerts whatever the
 * interleaving of its sources' records and however often they report.
 */

/** Every unkeyed rule of the random-log mix twice: as it is (stays at the source) and keyed by `card` (re-keyed). */
const mix = [
  ...baseRules,
  ...baseRules.filter((r) => !('key' in r)).map((r) => ({ ...r, id: `${r.id}-card`, key: 'card' })),
  // Keyed like the partition key: stays at the source.
  {
    id: 'acct-velocity',
    on: ['payment'],
    key: 'acct',
    pattern: { kind: 'threshold', aggregate: 'count', window: 300, operator: '>=', value: 2 },
  },
];
const byId = (id: string): (typeof mix)[number] => mix.find((r) => r.id === id) as never;

function change(rs: RuleSet, message: unknown, seq: number): RuleSet {
  const o = applyControl(rs, message, seq);
  if (!o.ok) throw new Error(JSON.stringify(o.problems));
  return o.ruleSet;
}

/** Rule-set versions: compatible and incompatible changes of re-keyed rules, a key change, a delete, a clear-state, a pause and resume. */
function versions(): RuleSet[] {
  const v1 = ruleSetOf({ op: 'replace-all', rules: mix });
  const velocity = byId('velocity');
  const spend = byId('spend-card');
  const cardType = byId('card-type');
  const v2 = change(
    v1,
    {
      op: 'changeset',
      changes: [
        { op: 'upsert-rule', rule: { ...velocity, pattern: { ...velocity.pattern, value: 2 } } },
        { op: 'upsert-rule', rule: { ...spend, pattern: { ...spend.pattern, window: 100 } } },
        { op: 'upsert-rule', rule: { ...cardType, key: ['type', 'card'] } },
        { op: 'delete-rule', id: 'peak-card' },
        { op: 'pause-rule', id: 'unconfirmed-card' },
      ],
    },
    2,
  );
  const v3 = change(v2, { op: 'clear-state', ruleId: 'login-pay-card' }, 3);
  const v4 = change(v3, { op: 'resume-rule', id: 'unconfirmed-card' }, 4);
  return [v1, v2, v3, v4];
}

const SETS = versions();
/** A last change that every source applies at the end of its log: every source then reports where it ended. */
const LAST = change(
  SETS.at(-1) as RuleSet,
  { op: 'upsert-rule', rule: { ...byId('velocity'), description: 'last' } },
  SETS.length + 1,
);
const BY_SEQ = new Map([...SETS, LAST].map((rs) => [rs.controlSeq, rs]));
const SPACES = [keySpaceOf(['card']), keySpaceOf(['card', 'type'])];
const REKEY = { partitionKey: ['acct'], partitions: 2, partitionOf };

/**
 * One source's log: the random-log records with `acct` (the partition key) in each event,
 * positions unique over all sources; `flush`: then a tick far ahead, as an idle source sends;
 * `last`: then the marker of {@link LAST}.
 */
function sourceLog(
  steps: Step[],
  src: number,
  sources: number,
  flush = false,
  last = false,
): PartitionRecord[] {
  const records = toRecords(steps, SETS);
  if (flush) records.push({ kind: 'tick', seq: records.length + 1, ts: 1e9 });
  if (last) records.push({ kind: 'marker', seq: records.length + 1, ruleSet: LAST });
  return records.map((r) => {
    const seq = (r.seq - 1) * sources + src + 1;
    if (r.kind !== 'event' || typeof r.data !== 'string' || !r.data.startsWith('{"type"'))
      return { ...r, seq };
    try {
      const e = JSON.parse(r.data) as Record<string, unknown>;
      // Some producers' clocks run ahead of the log's: event time passes the time stored.
      const publishTs = r.publishTs - (r.seq % 3) * 25;
      return { ...r, seq, publishTs, data: JSON.stringify({ ...e, acct: r.key, id: `e${seq}` }) };
    } catch {
      return { ...r, seq };
    }
  });
}

/**
 * What a downstream run produced that must not depend on the interleaving or on restarts: alerts
 * in order, each once (a restored partition raises again, with the same ids, what it raised after
 * its checkpoint; the alert sink drops the repeats), and where it ended (not `applied`: one record
 * may bring several changes into force, and a result names the last).
 */
function summary({ results, state }: { results: ProcessResult[]; state: PartitionState }): string {
  const once = new Set<string>();
  const out: string[] = [];
  for (const r of results)
    for (const x of [
      ...r.alerts.map((a) => JSON.stringify(['alert', a])),
      ...r.overflows.map((o) => JSON.stringify(['overflow', o])),
      ...r.late.map((l) => JSON.stringify(['late', l])),
      ...r.invalid.map((i) => JSON.stringify(['invalid', i])),
    ])
      if (!once.has(x)) {
        once.add(x);
        out.push(x);
      }
  return out
    .join('\n')
    .concat(
      ` in force ${state.ruleSet.controlSeq} watermark ${state.watermark}`,
      ` states ${keyedStateCount(state)} lineages ${stateLineages(state).sort().join(',')}`,
    );
}

/** The ids of the alerts a source raised itself (its rules that are not re-keyed). */
const localAlertIds = (results: ProcessResult[][]): string[] =>
  [...new Set(results.flat().flatMap((r) => r.alerts.map((a) => a.id)))].sort();

const sourceSteps = fc.array(step, { minLength: 20, maxLength: 100 });

describe('re-keying hop', () => {
  it('keeps re-keyed rules out of the source and forwards their events once per key space', () => {
    const rs = SETS[0] as RuleSet;
    const st = createPartition(rs, { partition: 0, rekey: REKEY });
    const out = processRecord(st, {
      kind: 'event',
      seq: 7,
      key: 'k1',
      publishTs: 1000,
      data: '{"type":"payment","card":"c1","amount":3,"acct":"k1","ts":1000}',
    });
    // The first event gives a watermark: the source reports it to every downstream partition.
    expect(
      out.sent.map((m) =>
        m.kind === 'forward'
          ? [m.kind, m.space, m.partition, m.n, m.key, m.srcSeq, m.controlSeq]
          : [m.kind, m.space, m.partition, m.n, m.watermark],
      ),
    ).toEqual([
      ['forward', 'card', partitionOf('c1', 2), 1, 'c1', 7, 1],
      ['forward', 'card~type', partitionOf('["c1","payment"]', 2), 1, '["c1","payment"]', 7, 1],
      ...SPACES.flatMap((space) =>
        [0, 1].map((p) => {
          const forwarded = p === partitionOf(space === 'card' ? 'c1' : '["c1","payment"]', 2);
          return ['report', space, p, forwarded ? 2 : 1, 999];
        }),
      ),
    ]);
    // `big-card` keeps no state but suppresses by card: re-keyed; `big` stays and fires here.
    const big = processRecord(st, {
      kind: 'event',
      seq: 8,
      key: 'k1',
      publishTs: 1001,
      data: '{"type":"payment","card":"c1","amount":20,"acct":"k1","ts":1001}',
    });
    expect(big.alerts.map((a) => a.ruleId)).toEqual(['big']);
    expect(big.matched).toContain('big-card');
  });

  it('explains where a re-keyed rule keeps its state', () => {
    const rs = SETS[0] as RuleSet;
    const hop = new SourceHop(REKEY);
    const event = { type: 'payment', card: 'c1', acct: 'k1', amount: 3 };
    const keyCheck = (id: string, e: Record<string, unknown>) =>
      explainRule(rs.rules.get(id) as never, e, rs.models, 'k1', hop).checks.key;
    expect(keyCheck('velocity', event).rekeyed).toEqual({
      space: 'card',
      partition: partitionOf('c1', 2),
    });
    expect(keyCheck('velocity', { type: 'payment' }).rekeyed).toEqual({
      space: 'card',
      partition: null,
    });
    // Keyed by the partition key, or by none: no hop.
    expect(keyCheck('acct-velocity', event).rekeyed).toBeUndefined();
    expect(keyCheck('spend', event).rekeyed).toBeUndefined();
  });

  it("restores a source's horizon: the latest event time judged, past the log's clock", () => {
    const rs = SETS[0] as RuleSet;
    const st = createPartition(rs, { partition: 0, rekey: REKEY });
    processRecord(st, {
      kind: 'event',
      seq: 1,
      key: 'k1',
      publishTs: 900,
      data: '{"type":"payment","card":"c1","amount":3,"acct":"k1","ts":1000}',
    });
    expect([st.maxTs, sourceHorizon(st)]).toEqual([900, 1000]);
    const store = memoryStore();
    writeParts(store, checkpointParts(st));
    const back = restorePartitionParts(store, () => rs, { rekey: REKEY });
    expect(sourceHorizon(back)).toBe(1000);
  });

  it('drops what a source held of the rules it now sends on when the hop settings change under its checkpoint', () => {
    const rs = SETS[0] as RuleSet;
    const sid = (id: string) => (rs.rules.get(id) as { sid: string }).sid;
    const [byCard, byAcct] = [sid('unconfirmed-card'), sid('acct-velocity')];
    const event = (seq: number, ts: number, e: object): PartitionRecord => ({
      kind: 'event',
      seq,
      key: 'k1',
      publishTs: ts,
      data: JSON.stringify({ ...e, acct: 'k1', ts }),
    });
    const tick = (seq: number, ts: number): PartitionRecord => ({ kind: 'tick', seq, ts });
    /** A partition with an open order of card c1 and a payment of account k1, checkpointed. */
    const written = (partitionKey: string[] | undefined) => {
      const options = partitionKey === undefined ? {} : { rekey: { ...REKEY, partitionKey } };
      const st = createPartition(rs, { partition: 0, ...options });
      processRecord(st, event(1, 1000, { type: 'order', card: 'c1' }));
      processRecord(st, event(2, 1001, { type: 'payment', card: 'c1', amount: 1 }));
      processRecord(st, tick(3, 1010));
      const store = memoryStore();
      writeParts(store, checkpointParts(st));
      return { st, store };
    };
    const restored = (store: ReturnType<typeof memoryStore>, partitionKey: string[]) =>
      restorePartitionParts(store, () => rs, { rekey: { ...REKEY, partitionKey } });
    const unconfirmed = (st: PartitionState) =>
      processRecord(st, tick(4, 5000)).alerts.filter((a) => a.ruleId === 'unconfirmed-card');

    /** The lineages of `st` less those of the rules a source with `partitionKey` sends on. */
    const kept = (st: PartitionState, partitionKey: string[]) => {
      const hop = new SourceHop({ ...REKEY, partitionKey });
      const sent = new Set([...rs.rules.values()].filter((r) => hop.sendsOn(r)).map((r) => r.sid));
      return stateLineages(st)
        .filter((l) => !sent.has(l))
        .sort();
    };

    // Off, then on: the order's absence timer was the source's; its confirmation would now go
    // through the hop, so the timer must not fire at the source.
    const off = written(undefined);
    expect(stateLineages(off.st)).toEqual(expect.arrayContaining([byAcct, byCard]));
    const on = restored(off.store, ['acct']);
    expect(stateLineages(on).sort()).toEqual(kept(off.st, ['acct']));
    expect(stateLineages(on)).toContain(byAcct);
    expect(stateLineages(on)).not.toContain(byCard);
    expect(unconfirmed(on)).toEqual([]);
    // Left as it was, the same partition fires it.
    expect(unconfirmed(off.st)).toHaveLength(1);
    // Another partition key: the rules keyed by card leave the source.
    const byCardKey = written(['card']);
    expect(stateLineages(byCardKey.st)).toContain(byCard);
    expect(stateLineages(restored(byCardKey.store, ['acct'])).sort()).toEqual(
      kept(byCardKey.st, ['acct']),
    );
    // The same settings: nothing is dropped.
    expect(stateLineages(restored(byCardKey.store, ['card'])).sort()).toEqual(
      stateLineages(byCardKey.st).sort(),
    );
  });

  it("ends a key space's state by event time, as in the event log's partitions", () => {
    const rules = [
      {
        id: 'fan-in',
        on: ['payment'],
        key: 'card',
        stateTtl: '2s',
        pattern: { kind: 'threshold', aggregate: 'count', window: '1h', operator: '>=', value: 9 },
      },
    ];
    const first = ruleSetOf({ op: 'replace-all', rules });
    const payment = (seq: number, ts: number, card: string): PartitionRecord => ({
      kind: 'event',
      seq,
      key: 'k1',
      publishTs: ts,
      data: JSON.stringify({ type: 'payment', card, acct: 'k1', ts }),
    });
    const tick = (seq: number, ts: number): PartitionRecord => ({ kind: 'tick', seq, ts });
    const downstream = (upTo: number) => {
      const logs = [[payment(1, 1000, 'c1'), payment(2, 2500, 'c2'), tick(3, upTo)]];
      const { queues } = runSources(logs, {
        first,
        sets: new Map([[first.controlSeq, first]]),
        downstreams: 1,
        partitionKey: ['acct'],
        reportEveryMs: 1,
      });
      return runDownstream('card', 0, queues.get('card')?.[0] ?? [], [], undefined, () => first)
        .state;
    };
    // Both cards' state is there after the second payment; 2 s after each card's payment (and up
    // to a second more: buckets of 1 s), event time ends it.
    expect(keyedStateCount(downstream(2800))).toBe(2);
    const later = downstream(4200);
    expect(keyedStateCount(later)).toBe(1);
    expect(later.expired.ttl).toBe(1);
    const done = downstream(6000);
    expect(keyedStateCount(done)).toBe(0);
    expect(done.expired.ttl).toBe(2);
  });

  it('numbers anew when the hop is turned on over a checkpoint written without it', () => {
    // On, off (a checkpoint without the hop), on again: the third stretch numbers from 1 with a
    // newer origin, and the downstream takes it although it took higher numbers of the first.
    let overlapping = 0;
    fc.assert(
      fc.property(sourceSteps, fc.nat(100), fc.nat(100), (steps, x, y) => {
        const log = sourceLog(steps, 0, 1, true, true);
        const [i1, i2] = [Math.min(x, y), Math.max(x, y)].map((i) => Math.min(i, log.length - 1));
        const at = (c: number): RuleSet => BY_SEQ.get(c) as RuleSet;
        const on = { outOfOrderMs: 0, rekey: REKEY };
        const run = (st: PartitionState, records: PartitionRecord[]) =>
          records.flatMap((r) => processRecord(st, r).sent);
        const first = createPartition(SETS[0] as RuleSet, { partition: 0, ...on });
        const sent1 = run(first, log.slice(0, i1));
        // One store, as the service keeps one per partition: checkpoints after the first are increments.
        const store = memoryStore();
        const checkpoint = (st: PartitionState) => {
          writeParts(store, checkpointParts(st));
          return store;
        };
        const off = restorePartitionParts(checkpoint(first), at, { outOfOrderMs: 0 });
        expect(off.hop).toBeUndefined();
        run(off, log.slice(i1, i2));
        const again = restorePartitionParts(checkpoint(off), at, on);
        const sent3 = run(again, log.slice(i2));
        expect(new Set(sent3.map((m) => m.origin))).toEqual(
          new Set(sent3.length === 0 ? [] : [off.offset]),
        );
        const record = (m: (typeof sent1)[number]) => downstreamRecord(0, m, 0, at(m.controlSeq));
        for (const space of SPACES)
          for (let p = 0; p < REKEY.partitions; p++) {
            const to = (list: typeof sent1) =>
              list.filter((m) => m.space === space && m.partition === p).map(record);
            const [old, now] = [to(sent1), to(sent3)];
            if (old.length === 0 || now.length === 0 || off.offset === 0) continue;
            overlapping++;
            // The new numbering's first message lost: what follows it waits for it (a gap), and
            // what is left of the old numbering after the new one began is stale.
            const early = now.slice(1);
            const stale = old.slice(-2);
            const { results } = runDownstream(
              space,
              p,
              [[...old, ...early, ...now, ...stale]],
              [],
              undefined,
              at,
            );
            expect(results.map((r) => r.skipped)).toEqual([
              ...old.map(() => undefined),
              ...early.map(() => 'gap'),
              ...now.map(() => undefined),
              ...stale.map(() => 'duplicate'),
            ]);
          }
      }),
      { numRuns: 60 },
    );
    expect(overlapping).toBeGreaterThan(20);
  });

  it('gives the same alerts for any interleaving of the sources, any report rate and replays', () => {
    let fired = 0;
    fc.assert(
      fc.property(
        fc
          .integer({ min: 1, max: 3 })
          .chain((n) =>
            fc.tuple(
              fc.array(sourceSteps, { minLength: n, maxLength: n }),
              fc.integer({ min: 1, max: 2 }),
              fc.array(fc.nat(7), { maxLength: 400 }),
              fc.integer({ min: 1, max: 200 }),
              fc.integer({ min: 0, max: 40 }),
              fc.boolean(),
              fc.tuple(fc.nat(150), fc.nat(150), fc.nat(150), fc.nat(150)),
              fc.record({ every: fc.integer({ min: 1, max: 20 }), at: fc.nat(200) }),
            ),
          ),
        ([
          stepsPerSource,
          downstreams,
          picks,
          every,
          ooo,
          flush,
          [from, to, gapAt, gapTo],
          crash,
        ]) => {
          const logs = stepsPerSource.map((s, src) =>
            sourceLog(s, src, stepsPerSource.length, flush, true),
          );
          const run = (reportEveryMs: number, restart?: Crash): SourceRun =>
            runSources(logs, {
              first: SETS[0] as RuleSet,
              sets: BY_SEQ,
              downstreams,
              partitionKey: ['acct'],
              reportEveryMs,
              outOfOrderMs: ooo,
              crash: restart,
            });
          // The sparse run's sources report at markers only (and once at first).
          const sparseRun = run(1e12);
          // The dense run's sources report as event time passes and restart once from a checkpoint.
          const denseRun = run(every, crash);
          expect(localAlertIds(denseRun.results)).toEqual(localAlertIds(sparseRun.results));
          const sparse = sparseRun.queues;
          const dense = denseRun.queues;
          for (const space of new Set([...sparse.keys(), ...dense.keys()]))
            for (let d = 0; d < downstreams; d++) {
              const a = runDownstream(space, d, sparse.get(space)?.[d] ?? []);
              // And its downstream sees a stretch of each source's records again, a stretch sent
              // again after a gap (a failed publish), and restarts.
              const replayed = (dense.get(space)?.[d] ?? []).map((l) =>
                withGap(withReplay(l, from, to), gapAt, gapTo),
              );
              const b = runDownstream(space, d, replayed, picks, crash, (c) => BY_SEQ.get(c));
              expect(summary(b)).toBe(summary(a));
              // A checkpoint names only rule sets the partition holds (the checkpointer saves those).
              const held = new Set(
                [b.state.ruleSet, ...(b.state.down?.ruleSets() ?? []), ...b.state.tags.keys()].map(
                  (rs) => rs.controlSeq,
                ),
              );
              for (const c of checkpointRuleSets(checkpointParts(b.state, true).meta))
                expect(held.has(c), `rule set ${c}`).toBe(true);
              // No lineage outlives the rule sets in play: each change ends the old ones for good.
              const inPlay = [a.state.ruleSet, ...(a.state.down?.released.values() ?? [])];
              for (const sid of stateLineages(a.state))
                expect(
                  inPlay.some((rs) => rs.stateIds.has(sid)),
                  sid,
                ).toBe(true);
              fired += a.results.reduce((n, r) => n + r.alerts.length, 0);
            }
        },
      ),
      { numRuns: 150 },
    );
    // The property held over runs that fired, not over silence.
    expect(fired).toBeGreaterThan(1000);
  });

  it('with no change, fires what one partition holding every event would', () => {
    // The reference: the re-keyed rules, keyed by their fields, in one partition that sees all
    // events in (time, position) order, up to the downstream watermark.
    const rekeyedOnly = ruleSetOf({
      op: 'replace-all',
      rules: mix.filter((r) => 'key' in r && r.key !== 'acct' && ('pattern' in r || r.alert)),
    });
    let compared = 0;
    fc.assert(
      fc.property(
        fc.array(fc.array(step, { minLength: 5, maxLength: 60 }), { minLength: 1, maxLength: 3 }),
        fc.array(fc.nat(7), { maxLength: 300 }),
        fc.boolean(),
        (stepsPerSource, picks, flush) => {
          const steps = stepsPerSource.map((s) => s.filter((x) => x.kind !== 'marker'));
          const logs = steps.map((s, src) => sourceLog(s, src, steps.length, flush));
          const { queues } = runSources(logs, {
            first: SETS[0] as RuleSet,
            sets: BY_SEQ,
            downstreams: 2,
            partitionKey: ['acct'],
            // Every step of event time reported: every downstream partition ends where the sources do.
            reportEveryMs: 1,
          });
          const hop: Alert[] = [];
          let watermark = Infinity;
          for (const space of queues.keys())
            for (let d = 0; d < 2; d++) {
              const { results, state } = runDownstream(
                space,
                d,
                queues.get(space)?.[d] ?? [],
                picks,
              );
              hop.push(...results.flatMap((r) => r.alerts));
              watermark = Math.min(watermark, state.watermark);
            }
          const events = new Map<number, { ts: number; key: string; data: unknown }>();
          for (const q of queues.values())
            for (const perSource of q)
              for (const list of perSource)
                for (const r of list)
                  if (r.kind === 'forward') {
                    const ts = (JSON.parse(r.data as string) as { ts: number }).ts;
                    events.set(r.srcSeq, { ts, key: 'k', data: r.data });
                  }
          // The reference's log is in (time, position) order; its alerts name events by source position.
          const ref = createPartition(rekeyedOnly, { partition: 0 });
          const refAlerts: Alert[] = [];
          const sorted = [...events].sort(([sa, a], [sb, b]) => a.ts - b.ts || sa - sb);
          sorted.forEach(([, e], i) => {
            if (e.ts <= watermark)
              refAlerts.push(
                ...processRecord(ref, {
                  kind: 'event',
                  seq: i + 1,
                  key: e.key,
                  data: e.data,
                  publishTs: e.ts,
                }).alerts,
              );
          });
          const srcSeq = (seq: number): number => sorted[seq - 1]?.[0] ?? seq;
          if (watermark > -Infinity && watermark < Infinity)
            refAlerts.push(
              ...processRecord(ref, {
                kind: 'tick',
                seq: Number.MAX_SAFE_INTEGER,
                ts: watermark + 1,
              }).alerts,
            );
          const norm = (list: Alert[]): string[] =>
            list
              .map((a) => JSON.stringify([a.ruleId, a.key, a.ts, a.events, a.values, a.title]))
              .sort();
          const renamed = refAlerts.map((a) => ({
            ...a,
            events: a.events.map((e) => ({ ...e, seq: srcSeq(e.seq) })),
          }));
          expect(norm(hop)).toEqual(norm(renamed));
          compared += refAlerts.length;
        },
      ),
      { numRuns: 150 },
    );
    expect(compared).toBeGreaterThan(300);
  });
});
