import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CheckpointParts, RuleSetJSON } from '../../rules/index.js';
import {
  CheckpointFencedError,
  type CheckpointStore,
} from '../../service/checkpoint/checkpoint-store.js';
import type { StoreEnv, StoreEnvFactory } from './store-env.js';

/** A checkpoint's parts, as `checkpointParts` makes them. */
export const checkpointParts = (
  offset: number,
  upserts: [string, string][],
  deletes: string[],
  full: boolean,
  more: {
    buffered?: [string, string][];
    released?: string[];
    lineages?: [number, string][];
    lineagesRemoved?: number[];
    controlSeq?: number;
  } = {},
): CheckpointParts => ({
  offset,
  controlSeq: more.controlSeq ?? 1,
  meta: `{"offset":${offset}}`,
  upserts,
  deletes,
  buffered: more.buffered ?? [],
  released: more.released ?? [],
  full,
  changed: [...upserts.map(([f]) => f), ...deletes],
  bufferedAfter: 0,
  releasedChunks: new Map(),
  lineages: more.lineages ?? [],
  lineagesRemoved: more.lineagesRemoved ?? [],
});

/** Fields `f<from>` … `f<to − 1>`, valued `<tag><i>`. */
export const fields = (from: number, to: number, tag: string): [string, string][] =>
  Array.from({ length: to - from }, (_, i) => [`f${from + i}`, `${tag}${from + i}`]);

/**
 * A full checkpoint of `size` keys, then an incremental one (upserts, deletes, buffered chunks
 * written and released, lineage numbers given and let go), then a full one: each read back whole.
 */
export async function roundTrip(store: CheckpointStore, p: number, size: number): Promise<void> {
  const events = (from: number, to: number): [string, string][] =>
    Array.from({ length: to - from }, (_, i) => [String(from + i), `[${from + i},"é€😀"]`]);
  const unicode: [string, string] = ['ключ', '["é€😀",{"d":"\u0000"}]'];
  // A v7 field is printable symbols, with JSON text of any character inside.
  const symbols: [string, string] = [
    'v7',
    `#$\`8${String.fromCharCode(...Array.from({ length: 95 }, (_, i) => 0x20 + i))}é😀`,
  ];
  await store.save(
    p,
    checkpointParts(10, [...fields(0, size, 'a'), unicode, symbols], [], true, {
      buffered: events(0, 10),
      lineages: [
        [1, 'a@1'],
        [2, 'b@2'],
        [3, 'ключ@3'],
      ],
    }),
    1,
  );
  await store.save(
    p,
    checkpointParts(
      20,
      fields(size / 2, size + size / 2, 'b'),
      fields(0, size / 4, '').map(([f]) => f),
      false,
      {
        buffered: events(10, 15),
        released: ['0', '1', '2', '3', '4'],
        // A number given and let go in one checkpoint is gone: additions are written first.
        lineages: [
          [4, 'd@4'],
          [5, 'e@5'],
        ],
        lineagesRemoved: [2, 5],
      },
    ),
    1,
  );
  const loaded = await store.load(p);
  const expected = new Map([
    ...fields(size / 4, size / 2, 'a'),
    unicode,
    symbols,
    ...fields(size / 2, size + size / 2, 'b'),
  ]);
  expect(loaded?.offset).toBe(20);
  expect(loaded?.controlSeq).toBe(1);
  expect(loaded?.meta).toBe('{"offset":20}');
  expect(new Map(loaded?.fields)).toEqual(expected);
  expect(new Map(loaded?.buffered)).toEqual(new Map(events(5, 15)));
  const numbering = new Map([
    [1, 'a@1'],
    [3, 'ключ@3'],
    [4, 'd@4'],
  ]);
  expect(new Map(loaded?.lineages)).toEqual(numbering);
  // A full checkpoint replaces everything but the numbering, which its fields go on using.
  await store.save(
    p,
    checkpointParts(30, fields(0, 3, 'c'), [], true, { buffered: events(20, 22) }),
    1,
  );
  const again = await store.load(p);
  expect(new Map(again?.fields)).toEqual(new Map(fields(0, 3, 'c')));
  expect(new Map(again?.buffered)).toEqual(new Map(events(20, 22)));
  expect(new Map(again?.lineages)).toEqual(numbering);
}

/** A rule set as stored; `controlSeq` tells two apart. */
const ruleSetJSON = (controlSeq: number): RuleSetJSON => ({
  format: 'vigil.rule-set.v1',
  controlSeq,
  rules: [],
  models: [],
});

/**
 * The semantics every {@link CheckpointStore} keeps: run against each implementation by a test
 * file that gives it the stores.
 */
export function checkpointStoreContract(factory: StoreEnvFactory): void {
  let env: StoreEnv;
  let store: CheckpointStore;
  beforeEach(async () => {
    env = await factory();
    store = await env.checkpointStore();
  });
  afterEach(async () => {
    await env.close();
  });

  describe('CheckpointStore contract', () => {
    it('full, then incremental upserts and deletes, restore the same fields, buffered chunks and lineage numbers', async () => {
      await roundTrip(store, 4, 40);
    });

    it('a partition never written has no checkpoint, offset 0 and control sequence 0', async () => {
      expect(await store.load(2)).toBeUndefined();
      expect(await store.loadOffset(2)).toBe(0);
      expect(await store.loadControlSeqs(3)).toEqual([0, 0, 0]);
      expect(await store.loadControlSeqs(0)).toEqual([]);
    });

    it('refuses a write from an older owner or with an older offset, changing nothing; the same offset again and a newer owner are accepted', async () => {
      const first = checkpointParts(100, fields(0, 10, 'x'), [], true, {
        buffered: [['100', '[1]']],
        lineages: [[1, 'x@1']],
      });
      await store.save(1, first, 5);
      const refused = [
        [
          checkpointParts(200, fields(0, 10, 'y'), ['f1'], false, {
            buffered: [['200', '[2]']],
            released: ['100'],
            lineages: [[2, 'y@2']],
            lineagesRemoved: [1],
            controlSeq: 9,
          }),
          4,
        ],
        [checkpointParts(50, fields(0, 10, 'y'), [], false), 5],
        [checkpointParts(40, fields(0, 40, 'z'), [], true), 5],
      ] as const;
      for (const [parts, fence] of refused) {
        const e: unknown = await store.save(1, parts, fence).catch((x: unknown) => x);
        expect(e).toBeInstanceOf(CheckpointFencedError);
        expect((e as CheckpointFencedError).code).toBe('VIGIL_E_CHECKPOINT_FENCED');
        expect((e as CheckpointFencedError).retryable).toBe(false);
      }
      const kept = await store.load(1);
      expect(kept?.offset).toBe(100);
      expect(new Map(kept?.fields)).toEqual(new Map(fields(0, 10, 'x')));
      expect([...(kept?.buffered ?? [])]).toEqual([['100', '[1]']]);
      expect([...(kept?.lineages ?? [])]).toEqual([[1, 'x@1']]);
      expect(await store.loadOffset(1)).toBe(100);
      expect(await store.loadControlSeqs(2)).toEqual([0, 1]);
      // The same checkpoint again (a retried write) is accepted.
      await store.save(1, checkpointParts(100, fields(0, 1, 'r'), [], false), 5);
      // A newer owner takes over, from an older offset (it restored an earlier checkpoint).
      await store.save(1, checkpointParts(60, fields(0, 1, 'n'), [], true), 6);
      expect((await store.load(1))?.offset).toBe(60);
      await expect(store.save(1, checkpointParts(70, [], [], false), 5)).rejects.toBeInstanceOf(
        CheckpointFencedError,
      );
    });

    it('loadOffset and loadControlSeqs follow the last accepted write of each partition', async () => {
      await store.save(0, checkpointParts(7, fields(0, 1, 'a'), [], true, { controlSeq: 3 }), 1);
      await store.save(2, checkpointParts(9, fields(0, 1, 'a'), [], true, { controlSeq: 4 }), 1);
      await store.save(2, checkpointParts(12, [], ['f0'], false, { controlSeq: 6 }), 1);
      expect(await store.loadOffset(0)).toBe(7);
      expect(await store.loadOffset(1)).toBe(0);
      expect(await store.loadOffset(2)).toBe(12);
      expect(await store.loadControlSeqs(4)).toEqual([3, 0, 6, 0]);
      const two = await store.load(2);
      expect(two?.controlSeq).toBe(6);
      expect([...(two?.fields ?? [])]).toEqual([]);
    });

    it('stores a rule set once per control sequence', async () => {
      expect(await store.loadRuleSet(3)).toBeUndefined();
      await store.saveRuleSet(3, JSON.stringify(ruleSetJSON(3)));
      // A second write of sequence 3 (another worker) changes nothing.
      await store.saveRuleSet(3, JSON.stringify(ruleSetJSON(33)));
      await store.saveRuleSet(4, JSON.stringify(ruleSetJSON(4)));
      expect(await store.loadRuleSet(3)).toEqual(ruleSetJSON(3));
      expect(await store.loadRuleSet(4)).toEqual(ruleSetJSON(4));
    });

    it('stores on one keyspace (workers, processes) share checkpoints, rule sets and fences', async () => {
      const other = await env.checkpointStore();
      await store.save(3, checkpointParts(10, fields(0, 2, 'a'), [], true), 2);
      await store.saveRuleSet(1, JSON.stringify(ruleSetJSON(1)));
      expect(new Map((await other.load(3))?.fields)).toEqual(new Map(fields(0, 2, 'a')));
      expect(await other.loadRuleSet(1)).toEqual(ruleSetJSON(1));
      await expect(other.save(3, checkpointParts(11, [], [], false), 1)).rejects.toBeInstanceOf(
        CheckpointFencedError,
      );
      await other.save(3, checkpointParts(11, fields(2, 3, 'b'), [], false), 3);
      expect(new Map((await store.load(3))?.fields)).toEqual(
        new Map([...fields(0, 2, 'a'), ...fields(2, 3, 'b')]),
      );
    });

    it('a checkpoint read is a copy: a later write does not change it', async () => {
      await store.save(0, checkpointParts(1, fields(0, 3, 'a'), [], true), 1);
      const read = await store.load(0);
      await store.save(0, checkpointParts(2, fields(0, 3, 'b'), ['f2'], false), 1);
      expect(new Map(read?.fields)).toEqual(new Map(fields(0, 3, 'a')));
    });

    it("a key space's view keeps its downstream partitions' checkpoints apart, shares rule sets, and is fenced by the partition's lease", async () => {
      const card = store.forSpace('card');
      const pair = store.forSpace('card~type');
      await roundTrip(card, 2, 12);
      await store.save(2, checkpointParts(5, fields(0, 1, 'log'), [], true, { controlSeq: 2 }), 1);
      await pair.save(2, checkpointParts(9, fields(0, 1, 'pair'), [], true, { controlSeq: 7 }), 1);
      expect(new Map((await store.load(2))?.fields)).toEqual(new Map(fields(0, 1, 'log')));
      expect(new Map((await pair.load(2))?.fields)).toEqual(new Map(fields(0, 1, 'pair')));
      expect(await card.loadOffset(2)).toBe(30);
      expect(await pair.loadControlSeqs(3)).toEqual([0, 0, 7]);
      expect(await store.loadControlSeqs(3)).toEqual([0, 0, 2]);
      await card.saveRuleSet(5, JSON.stringify(ruleSetJSON(5)));
      expect(await store.loadRuleSet(5)).toEqual(ruleSetJSON(5));
      // The owner of partition 1's lease runs its downstream partitions too: an older owner is refused.
      const leases = await env.leaseStore('a', 'i1', 10_000);
      await leases.heartbeat(true);
      const token = (await leases.acquire(1)) as number;
      await expect(
        pair.save(1, checkpointParts(3, [], [], true), token - 1),
      ).rejects.toBeInstanceOf(CheckpointFencedError);
      await pair.save(1, checkpointParts(3, fields(0, 1, 'ok'), [], true), token);
      // Closing a view leaves the store open.
      await card.close();
      expect(await store.loadOffset(2)).toBe(5);
    });

    it('a closed store refuses every operation', async () => {
      await store.close();
      await expect(store.loadOffset(0)).rejects.toThrow();
      await expect(store.save(0, checkpointParts(1, [], [], true), 1)).rejects.toThrow();
    });
  });
}
