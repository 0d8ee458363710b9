import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  createPartition,
  processRecord,
  checkpointParts,
  keyedStateCount,
  requeueCheckpoint,
  restorePartition,
  restorePartitionParts,
  snapshotPartition,
  type CheckpointParts,
  type PartitionState,
  type ProcessResult,
  type RuleSet,
  type StoredParts,
} from '../../rules/index.js';
import {
  allStates,
  expectWindowsOwned,
  Feed,
  memoryStore,
  ruleSetOf,
  writeParts,
} from './harness.js';
import { decodeAllKeys } from '../../rules/keyed-access.js';
import { outputs, rules, step, toRecords, versions } from './random-logs.js';
import { keyStatesJSON } from '../../rules/key-state-json.js';
import { decodeField } from '../../rules/checkpoint-field.js';
import { WindowArena } from '../../rules/cep/small-window.js';

const decoder = new TextDecoder();

/** What a store would hold after writing these parts alone. */
const stored = (parts: CheckpointParts): StoredParts => ({
  meta: parts.meta,
  buffered: parts.buffered,
  fields: parts.upserts,
  lineages: parts.lineages,
});

/** A checkpoint's fields with the lineages by name, as the snapshot writes them. */
const namedFields = (parts: CheckpointParts, st: PartitionState): Map<string, string> => {
  const arena = new WindowArena();
  return new Map(
    parts.upserts.map(([key, text]) => [
      key,
      JSON.stringify(
        keyStatesJSON(
          decodeField(key, text, arena, (n) => st.lineageIndex.nameOf(n)),
          arena,
        ),
      ),
    ]),
  );
};

/**
 * A field as an older version wrote it, from the one a checkpoint wrote now: v6 text
 * (`[base, [lineage number, state, sup?], …, expiry bucket?]`, base 0) or v4 text
 * (`[base, [lineage id, sup, state], …]`, no bucket).
 */
function asText(text: string, st: PartitionState, version: 4 | 6): string {
  const arena = new WindowArena();
  const states = decodeField('k', text, arena, (n) => st.lineageIndex.nameOf(n));
  const entries = keyStatesJSON(states, arena);
  if (version === 4) return JSON.stringify([0, ...entries]);
  return JSON.stringify([
    0,
    ...entries.map(([sid, sup, op]) => {
      const n = st.lineageIndex.numberIfAny(sid);
      return sup === null ? [n, op] : [n, op, sup];
    }),
    ...(states.exp === undefined ? [] : [states.exp]),
  ]);
}

/** The buffered events in a checkpoint's chunks, by sequence. */
const chunkEntries = (parts: CheckpointParts): unknown[][] =>
  parts.buffered
    .flatMap(([, text]) => JSON.parse(text) as unknown[][])
    .sort((a, b) => (a[1] as number) - (b[1] as number));

/** The meta of a format before v4, which held the buffered events. */
/**
 * A snapshot's text without the keys' expiry buckets: fields written before v6 record none, so
 * their keys are listed at the first bucket after the restore instead.
 */
function withoutExpiry(snapshot: Uint8Array | string): string {
  const json = JSON.parse(typeof snapshot === 'string' ? snapshot : decoder.decode(snapshot)) as {
    states: [string, unknown, number?][];
  };
  json.states = json.states.map(([key, lineages]) => [key, lineages]);
  return JSON.stringify(json);
}

function legacyMeta(parts: CheckpointParts, format: string): string {
  const json = JSON.parse(parts.meta) as Record<string, unknown>;
  delete json.ruleSets;
  json.format = format;
  json.buffer = chunkEntries(parts);
  return JSON.stringify(json);
}

describe('partition snapshot and restore', () => {
  it('cut a random log at a random point, snapshot, restore, continue: same outputs and state as an uninterrupted run', () => {
    const sets = versions();
    const bySeq = new Map(sets.map((rs) => [rs.controlSeq, rs]));
    const fired = new Map<string, number>();
    fc.assert(
      fc.property(
        fc.array(step, { minLength: 1, maxLength: 150, size: 'max' }),
        fc.nat(),
        fc.integer({ min: 0, max: 80 }),
        (steps, cutAt, outOfOrderMs) => {
          const records = toRecords(steps, sets);
          const cut = cutAt % (records.length + 1);
          const options = { partition: 5, outOfOrderMs };
          const whole = createPartition(sets[0] as RuleSet, options);
          const expected = records.map((r) => processRecord(whole, r));
          for (const a of expected.flatMap((r) => r.alerts))
            fired.set(a.ruleId, (fired.get(a.ruleId) ?? 0) + 1);

          const first = createPartition(sets[0] as RuleSet, options);
          const before = records.slice(0, cut).map((r) => processRecord(first, r));
          const bytes = snapshotPartition(first);
          const restored = restorePartition(bytes, (seq) => bySeq.get(seq), { outOfOrderMs });
          expect(snapshotPartition(restored)).toEqual(bytes);
          const after = records.slice(cut).map((r) => processRecord(restored, r));
          expect(outputs([...before, ...after])).toBe(outputs(expected));
          expect(new TextDecoder().decode(snapshotPartition(restored))).toBe(
            new TextDecoder().decode(snapshotPartition(whole)),
          );
          expectWindowsOwned(whole);
          expectWindowsOwned(restored);
        },
      ),
      { numRuns: 400 },
    );
    // The runs must actually produce alerts of every kind of rule.
    for (const r of rules) expect(fired.get(r.id) ?? 0, r.id).toBeGreaterThan(5);
    console.log(`snapshot property: alerts per rule ${JSON.stringify(Object.fromEntries(fired))}`);
  });

  it('incremental checkpoints applied to a store restore exactly: random checkpoints, failed writes handed back (some landing late), a random cut, same outputs and state', () => {
    const sets = versions();
    const bySeq = new Map(sets.map((rs) => [rs.controlSeq, rs]));
    let landedLate = 0;
    let lineagesLetGo = 0;
    fc.assert(
      fc.property(
        fc.array(step, { minLength: 1, maxLength: 150, size: 'max' }),
        fc.array(fc.boolean(), { minLength: 150, maxLength: 150 }),
        fc.array(fc.constantFrom('ok', 'ok', 'lost', 'late'), { minLength: 150, maxLength: 150 }),
        fc.array(fc.boolean(), { minLength: 150, maxLength: 150 }),
        fc.nat(),
        (steps, checkpointAfter, writes, landNow, cutAt) => {
          const records = toRecords(steps, sets);
          const options = { partition: 2, outOfOrderMs: 40 };
          const whole = createPartition(sets[0] as RuleSet, options);
          const expected = records.map((r) => processRecord(whole, r));
          // A store as Redis would hold it: the last meta, a hash of keyed-state fields and one
          // of chunks of buffered events; like Redis, it refuses a checkpoint older than its own.
          const store = { ...memoryStore(), offset: -1 };
          const apply = (parts: CheckpointParts): void => {
            if (parts.offset < store.offset) return;
            if (parts.lineagesRemoved.length > 0) lineagesLetGo++;
            writeParts(store, parts);
            store.offset = parts.offset;
          };
          const live = createPartition(sets[0] as RuleSet, options);
          apply(checkpointParts(live, true));
          const cut = cutAt % (records.length + 1);
          const before: ProcessResult[] = [];
          // Writes that timed out: handed back, and written all the same a little later.
          const late: CheckpointParts[] = [];
          records.slice(0, cut).forEach((r, i) => {
            if (late.length > 0 && landNow[i]) {
              apply(late.shift() as CheckpointParts);
              landedLate++;
            }
            before.push(processRecord(live, r));
            if (!checkpointAfter[i]) return;
            const parts = checkpointParts(live, i % 37 === 36);
            if (writes[i] === 'ok') {
              apply(parts);
              // No chunk whose events are all released is left behind.
              const watermark = (JSON.parse(store.meta) as { watermark: number | null }).watermark;
              for (const [field, text] of store.buffered) {
                const latest = Math.max(...(JSON.parse(text) as [number][]).map(([ts]) => ts));
                expect(latest, `chunk ${field}`).toBeGreaterThan(watermark ?? -Infinity);
              }
              return;
            }
            // The store refused or lost this one: its changes go to the next checkpoint instead.
            requeueCheckpoint(live, parts);
            if (writes[i] === 'late') late.push(parts);
          });
          // Crash: everything after the last checkpoint written is lost and replayed from the log.
          const restored = restorePartitionParts(store, (seq) => bySeq.get(seq), {
            outOfOrderMs: 40,
          });
          let from = records.findIndex((r) => r.seq > restored.offset);
          if (from < 0) from = records.length;
          const after = records.slice(from).map((r) => processRecord(restored, r));
          expect(outputs([...before.slice(0, from), ...after])).toBe(outputs(expected));
          expect(decoder.decode(snapshotPartition(restored))).toBe(
            decoder.decode(snapshotPartition(whole)),
          );
          // The restored partition goes on as the store's owner: its keys restored and not
          // touched (still text) whose lineage it dropped were rewritten with the numbers it let
          // go, so its checkpoint restores too.
          late.length = 0;
          apply(checkpointParts(restored));
          const again = restorePartitionParts(store, (seq) => bySeq.get(seq), {
            outOfOrderMs: 40,
          });
          expect(decoder.decode(snapshotPartition(again))).toBe(
            decoder.decode(snapshotPartition(whole)),
          );
          // Once a checkpoint is written, the store numbers exactly the lineages the partition
          // does, and none that was dropped: only rule sets still in use name them.
          expect(new Map(store.lineages)).toEqual(new Map(restored.lineageIndex.entries()));
          for (const sid of store.lineages.values())
            expect(restored.ruleSet.stateIds.has(sid) || restored.hitCounts.has(sid), sid).toBe(
              true,
            );
        },
      ),
      // Shrinking these runs took minutes: a failure is reported as found (with its seed).
      { numRuns: 300, endOnFailure: true },
    );
    expect(landedLate).toBeGreaterThan(50);
    // Rule changes drop lineages, and their numbers go from the store.
    expect(lineagesLetGo).toBeGreaterThan(20);
  });

  for (const version of [4, 6] as const)
    it(`a v${version} checkpoint (${version === 4 ? 'text fields naming lineages by id' : 'text fields naming lineages by number'}) restores, goes on under v7 with rule changes that drop lineages its texts hold, and its store restores again (random logs)`, () => {
      const sets = versions();
      const bySeq = new Map(sets.map((rs) => [rs.controlSeq, rs]));
      let dropsOverText = 0;
      fc.assert(
        fc.property(
          fc.array(step, { minLength: 1, maxLength: 150, size: 'max' }),
          fc.nat(),
          fc.array(fc.boolean(), { minLength: 150, maxLength: 150 }),
          (steps, cutAt, checkpointAfter) => {
            const records = toRecords(steps, sets);
            const options = { partition: 3, outOfOrderMs: 40 };
            const whole = createPartition(sets[0] as RuleSet, options);
            records.forEach((r) => processRecord(whole, r));
            // In the first half: markers after the cut meet the restored texts.
            const cut = cutAt % (Math.ceil(records.length / 2) + 1);
            const textWriter = createPartition(sets[0] as RuleSet, options);
            records.slice(0, cut).forEach((r) => processRecord(textWriter, r));
            // The store as that version left it: its meta's format, every field as its text.
            const base = checkpointParts(textWriter, true);
            const meta = JSON.parse(base.meta) as Record<string, unknown>;
            meta.format = `vigil.partition.v${version}`;
            const store = memoryStore(JSON.stringify(meta));
            for (const [key, text] of base.upserts)
              store.fields.set(key, asText(text, textWriter, version));
            // v4 fields name lineages by id; v5 on keep the numbers beside the meta.
            if (version === 6) for (const [n, sid] of base.lineages) store.lineages.set(n, sid);
            for (const [f, v] of base.buffered) store.buffered.set(f, v);
            const apply = (parts: CheckpointParts): void => writeParts(store, parts);
            const restore = () =>
              restorePartitionParts(store, (seq) => bySeq.get(seq), { outOfOrderMs: 40 });
            const upgraded = restore();
            records.slice(cut).forEach((r, i) => {
              const held = upgraded.raw.size;
              processRecord(upgraded, r);
              if (r.kind === 'marker' && upgraded.raw.size < held) dropsOverText++;
              if (checkpointAfter[i]) apply(checkpointParts(upgraded));
            });
            apply(checkpointParts(upgraded));
            decodeAllKeys(upgraded);
            expectWindowsOwned(upgraded);
            // The same states. v6 fields record their keys' expiry buckets; the keys of v4
            // fields are listed where v4 recorded none (the first bucket after the restore).
            if (version === 6)
              expect(decoder.decode(snapshotPartition(restore()))).toBe(
                decoder.decode(snapshotPartition(whole)),
              );
            else
              expect(withoutExpiry(snapshotPartition(restore()))).toBe(
                withoutExpiry(snapshotPartition(whole)),
              );
          },
        ),
        { numRuns: 300, endOnFailure: true },
      );
      // Rule changes met restored texts that held the lineages they dropped.
      console.log(
        `v${version} upgrade property: ${dropsOverText} markers dropped lineages held by v${version} texts`,
      );
      expect(dropsOverText).toBeGreaterThan(2);
    });

  it('checkpoint fields (v3) and the v2 fields of the snapshot restore the same state, for windows with evicted heads too', () => {
    const rs = ruleSetOf(
      { op: 'replace-all', rules },
      {
        op: 'upsert-rule',
        rule: {
          id: 'minmax',
          on: ['payment'],
          key: 'card',
          pattern: {
            kind: 'threshold',
            aggregate: 'max',
            field: 'amount',
            window: 50,
            operator: '>',
            value: 1e9,
          },
        },
      },
      {
        op: 'upsert-rule',
        rule: {
          id: 'sum',
          on: ['payment'],
          key: 'card',
          pattern: {
            kind: 'threshold',
            aggregate: 'sum',
            field: 'amount',
            window: 40,
            operator: '>',
            value: 1e9,
          },
        },
      },
    );
    const feed = new Feed(rs);
    // 430 events: heads stop short of the 64 evictions that compact a window.
    for (let i = 0; i < 430; i++)
      feed.event({ type: 'payment', card: `c${i % 3}`, amount: (i * 37) % 101, ts: 1000 + i * 3 });
    const snapshot = decoder.decode(snapshotPartition(feed.state));
    const parts = checkpointParts(feed.state, true);
    const fromParts = restorePartitionParts(stored(parts), () => rs, {});
    expect(decoder.decode(snapshotPartition(fromParts))).toBe(snapshot);
    // A v2 field (absolute timestamps, every part written out) restores to the same state.
    const v2 = (JSON.parse(snapshot) as { states: [string, unknown[]][] }).states.map(
      ([key, lineages]): [string, string] => [key, JSON.stringify(lineages)],
    );
    // (Under the meta of v5, whose fields record no expiry bucket: v6 fields end with theirs.)
    const fromV2 = restorePartitionParts(
      { ...stored(parts), meta: parts.meta.replace('partition.v6', 'partition.v5'), fields: v2 },
      () => rs,
      {},
    );
    expect(withoutExpiry(snapshotPartition(fromV2))).toBe(withoutExpiry(snapshot));
    // The windows really had evicted entries at their head when the checkpoint was taken.
    const heads = allStates(feed.state).map(({ op }) => (op as { h?: number } | undefined)?.h ?? 0);
    expect(Math.max(...heads)).toBeGreaterThan(0);
  });

  it('refuses bytes that are not a snapshot, and a snapshot whose rule set is missing', () => {
    expect(() => restorePartition(new TextEncoder().encode('nope'), () => undefined, {})).toThrow(
      /not JSON/,
    );
    const st = createPartition(versions()[1] as RuleSet, { partition: 1 });
    expect(() => restorePartition(snapshotPartition(st), () => undefined, {})).toThrow(
      /control sequence 2/,
    );
  });

  it('restores a checkpoint of the previous format (v1: a field per rule and key), and the next checkpoint rewrites it', () => {
    const rs = ruleSetOf({ op: 'replace-all', rules });
    const feed = new Feed(rs, 40);
    for (let i = 0; i < 300; i++)
      feed.event({ type: 'payment', card: `c${i % 7}`, amount: (i * 13) % 50, ts: 1000 + i * 5 });
    const now = checkpointParts(feed.state, true);
    // The same state as v1 stored it.
    const v1: [string, string][] = [];
    const states = (
      JSON.parse(decoder.decode(snapshotPartition(feed.state))) as {
        states: [string, [string, unknown, unknown][]][];
      }
    ).states;
    for (const [key, lineages] of states)
      for (const [sid, sup, op] of lineages)
        v1.push([JSON.stringify([sid, key]), JSON.stringify([sup, op])]);
    const meta = legacyMeta(now, 'vigil.partition.v1');
    const restored = restorePartitionParts({ meta, buffered: [], fields: v1 }, () => rs, {
      outOfOrderMs: 40,
    });
    expect(withoutExpiry(snapshotPartition(restored))).toBe(
      withoutExpiry(snapshotPartition(feed.state)),
    );
    const next = checkpointParts(restored);
    expect([...next.deletes].sort()).toEqual(v1.map(([f]) => f).sort());
    // Each partition numbers its lineages as it first writes them: compared by name.
    expect(namedFields(next, restored)).toEqual(namedFields(now, feed.state));
  });

  it('restores a v2 meta, whose buffered events carry their hits, and writes them back as they were', () => {
    const rs = ruleSetOf({ op: 'replace-all', rules });
    const feed = new Feed(rs, 40);
    for (let i = 0; i < 300; i++)
      feed.event(
        { type: 'payment', card: `c${i % 7}`, amount: (i * 13) % 50, ts: 1000 + i * 5 },
        `k${i % 3}`,
      );
    expect(feed.state.buffer.size).toBeGreaterThan(0);
    const now = checkpointParts(feed.state, true);
    // v3 stores each buffered event's record key; v2 stored the hits decided at arrival.
    const hitsBySeq = new Map(
      feed.state.buffer
        .sorted()
        .map((b) => [
          b.seq,
          b.hits.toArray().map((x) => [x.rule.id, x.key, x.trigger ? 1 : 0, x.expected ? 1 : 0]),
        ]),
    );
    const json = JSON.parse(legacyMeta(now, 'vigil.partition.v2')) as { buffer: unknown[][] };
    for (const b of json.buffer) b[5] = hitsBySeq.get(b[1] as number);
    const restored = restorePartitionParts(
      { meta: JSON.stringify(json), buffered: [], fields: now.upserts, lineages: now.lineages },
      () => rs,
      { outOfOrderMs: 40 },
    );
    expect(decoder.decode(snapshotPartition(restored))).toBe(
      decoder.decode(snapshotPartition(feed.state)),
    );
    // Their record key is not known: the next checkpoint keeps their hits, and writes them as
    // a chunk, incremental as it is.
    const again = checkpointParts(restored);
    expect(again.buffered.length).toBe(1);
    expect(chunkEntries(again).map((b) => b[5])).toEqual(json.buffer.map((b) => b[5]));
    expect(again.meta).not.toContain('"buffer"');
    // A v3 meta (buffered events inside, record keys) restores the same partition, its hits
    // recomputed, and the next checkpoint writes its buffered events as a chunk.
    const v3 = restorePartitionParts(
      {
        meta: legacyMeta(now, 'vigil.partition.v3'),
        buffered: [],
        fields: now.upserts,
        lineages: now.lineages,
      },
      () => rs,
      { outOfOrderMs: 40 },
    );
    expect(decoder.decode(snapshotPartition(v3))).toBe(
      decoder.decode(snapshotPartition(feed.state)),
    );
    expect(chunkEntries(checkpointParts(v3))).toEqual(chunkEntries(now));
    // And so does the checkpoint itself.
    const fromV4 = restorePartitionParts(stored(now), () => rs, { outOfOrderMs: 40 });
    expect(decoder.decode(snapshotPartition(fromV4))).toBe(
      decoder.decode(snapshotPartition(feed.state)),
    );
  });

  it('names the key whose checkpointed state is not JSON, or not a list of lineages', () => {
    const rs = versions()[1] as RuleSet;
    const live = createPartition(rs, { partition: 1 });
    const { meta } = checkpointParts(live, true);
    const good =
      '[["velocity@1",null,{"k":"s","sums":false,"t":[5],"v":[],"f":0,"mn":[],"mx":[],"d":null}]]';
    const restore = (fields: [string, string][]) =>
      restorePartitionParts({ meta, buffered: [], fields }, () => rs, {});
    // Restored keys stay as their text until the partition touches them; counting decodes all.
    const decoded = (fields: [string, string][]) => {
      const st = restore(fields);
      keyedStateCount(st);
      return st;
    };
    const lazy = restore([['a', good]]);
    expect([lazy.raw.size, lazy.states.size]).toEqual([1, 0]);
    // Untouched, a key's field is written back as it was read.
    expect([...checkpointParts(lazy, true).upserts]).toEqual([['a', good]]);
    expect(
      keyedStateCount(
        restore([
          ['a', good],
          ['b', good],
        ]),
      ),
    ).toBe(2);
    // The same state as v3 writes it: timestamps as offsets from the base, empty parts left out;
    // as v7 writes it: `#`, no expiry bucket (`$`), lineage 1 (`` ` ``: the last digit 1), a
    // count window (`2`), of size 1 (`` ` ``), front end 0 (`_`), timestamp 5 (`i`: zigzag 10).
    // The lineage's number is stored beside the meta.
    const v3 = '[5,["velocity@1",null,{"k":"s","t":[0]}]]';
    const rewritten = checkpointParts(decoded([['a', good]]), true);
    expect([...rewritten.upserts]).toEqual([['a', '#$`2`_i']]);
    expect(rewritten.lineages).toEqual([[1, 'velocity@1']]);
    expect(snapshotPartition(restore([['a', v3]]))).toEqual(
      snapshotPartition(restore([['a', good]])),
    );
    expect(
      snapshotPartition(
        restorePartitionParts(
          { meta, buffered: [], fields: rewritten.upserts, lineages: rewritten.lineages },
          () => rs,
          {},
        ),
      ),
    ).toEqual(snapshotPartition(restore([['a', good]])));
    // A timestamp that is not an integer (a v2 checkpoint's publish time) is written as it is.
    const fractional = good.replace('[5]', '[5.25]');
    const exact = checkpointParts(decoded([['a', fractional]]), true);
    expect(exact.upserts[0]?.[1]).toMatch(/^#\$`2`_!/);
    expect(
      snapshotPartition(
        restorePartitionParts(
          { meta, buffered: [], fields: exact.upserts, lineages: exact.lineages },
          () => rs,
          {},
        ),
      ),
    ).toEqual(snapshotPartition(restore([['a', fractional]])));
    // A damaged field is reported when the key is decoded, naming the key.
    expect(() =>
      decoded([
        ['a', good],
        ['b', '{oops'],
        ['c', good],
      ]),
    ).toThrow(/key "b" is not JSON/);
    expect(() =>
      decoded([
        ['a', good],
        ['b', `${good},${good}`],
      ]),
    ).toThrow(/key "b" is not JSON/);
    expect(() => decoded([['a', '[]']])).toThrow(/keyed state of "a"/);
    // A lineage number the checkpoint does not list.
    expect(() => decoded([['a', '[5,[7,{"k":"s","t":[0]}]]']])).toThrow(
      /keyed state of "a" names lineage number 7, which the checkpoint's lineage list does not hold/,
    );
    // v7 fields: cut short, an unknown kind, a size beyond the field, an unknown lineage number.
    const lineages: [number, string][] = [[1, 'velocity@1']];
    const v7 = (text: string) => {
      const st = restorePartitionParts(
        { meta, buffered: [], fields: [['a', text]], lineages },
        () => rs,
        {},
      );
      keyedStateCount(st);
    };
    v7('#$`2`_i');
    expect(() => v7('#$`2`_')).toThrow(/key "a" is damaged at character 6: expected a number/);
    expect(() => v7('#$`:`_i')).toThrow(
      /key "a" is damaged at character 3: expected an entry kind/,
    );
    expect(() => v7('#$`2~_i')).toThrow(
      /key "a" is damaged at character 5: expected a window size/,
    );
    expect(() => v7('#$h2`_i')).toThrow(/"a" names lineage number 9/);
    expect(() => v7('#$')).toThrow(/key "a" is damaged at character 2: expected a lineage state/);
  });
});
