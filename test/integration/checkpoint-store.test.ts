import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CheckpointFencedError,
  RedisCheckpointStore,
} from '../../service/checkpoint/checkpoint-store.js';
import { startRedis, type ServerHandle } from '../../scripts/local-servers.js';
import {
  checkpointParts,
  checkpointStoreContract,
  fields,
  roundTrip,
} from '../contract/checkpoint-store.contract.js';
import { redisStoreEnv } from '../contract/store-env.js';

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

describe('RedisCheckpointStore (real redis-server)', () => {
  checkpointStoreContract(redisStoreEnv(() => redis.url));

  // The contract's round trip writes one small script call; these take the Lua batches of a
  // large write and the staged write of a larger one.
  for (const [name, size] of [
    ['in several batches of one script', 1200],
    ['large (staged in chunks)', 6000],
  ] as const)
    it(`${name}: full, then incremental upserts and deletes, restore the same fields and buffered events`, async () => {
      await roundTrip(store, size, size);
    });

  it('a refused staged write leaves nothing staged', async () => {
    await store.save(1, checkpointParts(100, fields(0, 10, 'x'), [], true), 5);
    await expect(
      store.save(1, checkpointParts(40, fields(0, 5000, 'z'), [], true), 5),
    ).rejects.toBeInstanceOf(CheckpointFencedError);
    await expect(
      store.save(1, checkpointParts(200, fields(0, 5000, 'z'), ['f1'], false), 4),
    ).rejects.toBeInstanceOf(CheckpointFencedError);
    expect(new Map((await store.load(1))?.fields)).toEqual(new Map(fields(0, 10, 'x')));
    const raw = new Redis(redis.url);
    expect(await raw.keys(`${prefix}*staged*`)).toEqual([]);
    expect(await raw.keys(`${prefix}*deleted*`)).toEqual([]);
    await raw.quit();
  });
});
