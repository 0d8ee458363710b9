import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CheckpointParts } from '../../rules/index.js';
import {
  CheckpointFencedError,
  RedisCheckpointStore,
} from '../../service/checkpoint/checkpoint-store.js';
import { startRedis, type ServerHandle } from '../../scripts/local-servers.js';

let dir: string;
let redis: ServerHandle;
let store: RedisCheckpointStore;
const prefix = `t${Date.now()}:`;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'vigil-store-'));
  redis = await startRedis({ dataDir: dir });
  store = new RedisCheckpointStore(redis.url, prefix);
});

afterAll(async () => {
  await store?.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const parts = (
  offset: number,
  upserts: [string, string][],
  deletes: string[],
  full: boolean,
  buffered: [string, string][] = [],
  released: string[] = [],
  lineages: [number, string][] = [],
  lineagesRemoved: number[] = [],
): CheckpointParts => ({
  offset,
  controlSeq: 1,
  meta: `{"offset":${offset}}`,
  upserts: upserts,
  deletes,
  buffered: buffered,
  released,
  full,
  changed: [...upserts.map(([f]) => f), ...deletes],
  bufferedAfter: 0,
  releasedChunks: new Map(),
  lineages,
  lineagesRemoved,
});
const fields = (from: number, to: number, tag: string): [string, string][] =>
  Array.from({ length: to - from }, (_, i) => [`f${from + i}`, `${tag}${from + i}`]);

describe('RedisCheckpointStore (real redis-server)', () => {
  for (const [name, size] of [
    ['small', 40],
    ['in several batches of one script', 1200],
    ['large (staged in chunks)', 6000],
  ] as const) {
    it(`${name}: full, then incremental upserts and deletes, restore the same fields and buffered events`, async () => {
      const p = size;
      const events = (from: number, to: number): [string, string][] =>
        Array.from({ length: to - from }, (_, i) => [String(from + i), `[${from + i},"é€😀"]`]);
      const unicode: [string, string] = ['ключ', '["é€😀",{"d":"\u0000"}]'];
      await store.save(
        p,
        parts(
          10,
          [...fields(0, size, 'a'), unicode],
          [],
          true,
          events(0, 10),
          [],
          [
            [1, 'a@1'],
            [2, 'b@2'],
            [3, 'ключ@3'],
          ],
        ),
        1,
      );
      await store.save(
        p,
        parts(
          20,
          fields(size / 2, size + size / 2, 'b'),
          fields(0, size / 4, '').map(([f]) => f),
          false,
          events(10, 15),
          ['0', '1', '2', '3', '4'],
          // A number given and let go in one checkpoint is gone: additions are written first.
          [
            [4, 'd@4'],
            [5, 'e@5'],
          ],
          [2, 5],
        ),
        1,
      );
      const loaded = await store.load(p);
      const expected = new Map([
        ...fields(size / 4, size / 2, 'a'),
        unicode,
        ...fields(size / 2, size + size / 2, 'b'),
      ]);
      expect(loaded?.offset).toBe(20);
      expect(new Map(loaded?.fields)).toEqual(expected);
      expect(new Map(loaded?.buffered)).toEqual(new Map(events(5, 15)));
      const numbering = new Map([
        [1, 'a@1'],
        [3, 'ключ@3'],
        [4, 'd@4'],
      ]);
      expect(new Map(loaded?.lineages)).toEqual(numbering);
      // A full checkpoint replaces everything but the numbering, which its fields go on using.
      await store.save(p, parts(30, fields(0, 3, 'c'), [], true, events(20, 22)), 1);
      const again = await store.load(p);
      expect(new Map(again?.fields)).toEqual(new Map(fields(0, 3, 'c')));
      expect(new Map(again?.buffered)).toEqual(new Map(events(20, 22)));
      expect(new Map(again?.lineages)).toEqual(numbering);
    });
  }

  it('refuses a write from an older owner or with an older offset, and leaves nothing staged', async () => {
    await store.save(1, parts(100, fields(0, 10, 'x'), [], true, [], [], [[1, 'x@1']]), 5);
    await expect(
      store.save(1, parts(200, fields(0, 10, 'y'), [], false, [], [], [[2, 'y@2']], [1]), 4),
    ).rejects.toBeInstanceOf(CheckpointFencedError);
    await expect(store.save(1, parts(50, fields(0, 10, 'y'), [], false), 5)).rejects.toBeInstanceOf(
      CheckpointFencedError,
    );
    await expect(
      store.save(1, parts(40, fields(0, 5000, 'z'), [], true), 5),
    ).rejects.toBeInstanceOf(CheckpointFencedError);
    expect((await store.load(1))?.offset).toBe(100);
    expect(new Map((await store.load(1))?.fields)).toEqual(new Map(fields(0, 10, 'x')));
    expect([...((await store.load(1))?.lineages ?? [])]).toEqual([[1, 'x@1']]);
    const raw = new Redis(redis.url);
    expect(await raw.keys(`${prefix}*staged*`)).toEqual([]);
    expect(await raw.keys(`${prefix}*deleted*`)).toEqual([]);
    await raw.quit();
    // A newer owner takes over.
    await store.save(1, parts(60, fields(0, 1, 'n'), [], true), 6);
    expect((await store.load(1))?.offset).toBe(60);
  });
});
