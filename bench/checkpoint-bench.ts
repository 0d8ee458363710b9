/**
 * `npm run bench:checkpoint`: checkpoint cost with many keys, measured on the real store.
 * - one partition holding `--keys` keys (default 1,000,000) of sliding-window state;
 * - a full checkpoint (every key) and an incremental one after 1% of the keys changed, written to
 *   a real redis-server through RedisCheckpointStore: duration and bytes;
 * - recovery: load + restore of the whole partition from Redis (what a new owner does after
 *   `kill -9`), seconds;
 * - resident memory per key of the partition state.
 * Prints progress, then one JSON line with at least checkpointFullSeconds, checkpointIncrementalSeconds,
 * bytesPerKey, recoverySeconds, memoryBytesPerKey.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import {
  applyControl,
  checkpointParts,
  createPartition,
  emptyRuleSet,
  keyedStateCount,
  processRecord,
  restorePartitionParts,
} from '../rules/index.js';
import { RedisCheckpointStore } from '../service/checkpoint-store.js';
import { startRedis } from '../service/index.js';

const argKeys = process.argv.indexOf('--keys');
const KEYS =
  argKeys >= 0
    ? Number(process.argv[argKeys + 1])
    : process.argv.includes('--quick')
      ? 100_000
      : 1_000_000;
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const say = (s: string): void => console.log(`[bench:checkpoint] ${s}`);

const rs = applyControl(
  emptyRuleSet(),
  {
    op: 'upsert-rule',
    rule: {
      id: 'velocity',
      on: ['payment'],
      pattern: {
        kind: 'threshold',
        aggregate: 'sum',
        field: 'amount',
        window: '1h',
        operator: '>=',
        value: 1e12,
      },
    },
  },
  1,
).ruleSet;
const dir = mkdtempSync(join(tmpdir(), 'vigil-bench-checkpoint-'));
const redis = await startRedis({ dataDir: dir });
const store = new RedisCheckpointStore(redis.url, 'bench:');
try {
  gc();
  const heapBefore = process.memoryUsage().heapUsed;
  const st = createPartition(rs, { partition: 0 });
  const base = Date.UTC(2026, 10, 29);
  let seq = 0;
  // Two events per key, so each key holds a small window.
  for (let round = 0; round < 2; round++) {
    for (let k = 0; k < KEYS; k++) {
      const ts = base + round * 1000 + Math.floor(k / 100);
      processRecord(st, {
        kind: 'event',
        seq: ++seq,
        key: `k${k}`,
        data: { type: 'payment', amount: (k % 97) + round, ts },
        publishTs: ts,
      });
    }
  }
  processRecord(st, { kind: 'tick', seq: ++seq, ts: base + 10_000 });
  gc();
  const memoryBytesPerKey = Math.round((process.memoryUsage().heapUsed - heapBefore) / KEYS);
  say(`${KEYS} keys in state, ${memoryBytesPerKey} bytes of heap per key`);

  let t = performance.now();
  const full = checkpointParts(st, true);
  const fullBytes =
    full.meta.length + full.upserts.reduce((n, [f, v]) => n + f.length + v.length, 0);
  await store.save(0, full, 1);
  const checkpointFullSeconds = (performance.now() - t) / 1000;
  say(`full checkpoint: ${checkpointFullSeconds.toFixed(2)} s, ${(fullBytes / 1e6).toFixed(1)} MB`);

  // 1% of the keys get an event, then an incremental checkpoint.
  const changed = Math.max(1, Math.floor(KEYS / 100));
  for (let k = 0; k < changed; k++) {
    const ts = base + 30_000;
    processRecord(st, {
      kind: 'event',
      seq: ++seq,
      key: `k${k * 100}`,
      data: { type: 'payment', amount: 1, ts },
      publishTs: ts,
    });
  }
  processRecord(st, { kind: 'tick', seq: ++seq, ts: base + 40_000 });
  t = performance.now();
  const inc = checkpointParts(st, false);
  const incBytes = inc.meta.length + inc.upserts.reduce((n, [f, v]) => n + f.length + v.length, 0);
  await store.save(0, inc, 1);
  const checkpointIncrementalSeconds = (performance.now() - t) / 1000;
  say(
    `incremental checkpoint (${inc.upserts.length} keys changed): ${(checkpointIncrementalSeconds * 1000).toFixed(1)} ms, ${(incBytes / 1e3).toFixed(1)} kB`,
  );

  t = performance.now();
  const loaded = await store.load(0);
  if (loaded === undefined) throw new Error('nothing stored');
  const loadSeconds = (performance.now() - t) / 1000;
  const restored = restorePartitionParts(loaded.meta, loaded.fields, () => rs, {});
  const recoverySeconds = (performance.now() - t) / 1000;
  const restoredKeys = keyedStateCount(restored);
  say(
    `recovery (load + restore of ${restoredKeys} keys): ${recoverySeconds.toFixed(2)} s (${loadSeconds.toFixed(2)} s of it reading Redis)`,
  );

  console.log(
    JSON.stringify({
      bench: 'checkpoint',
      keys: KEYS,
      checkpointFullSeconds: Number(checkpointFullSeconds.toFixed(3)),
      checkpointFullBytes: fullBytes,
      checkpointIncrementalSeconds: Number(checkpointIncrementalSeconds.toFixed(4)),
      checkpointIncrementalBytes: incBytes,
      incrementalKeys: inc.upserts.length,
      bytesPerKey: Math.round(fullBytes / KEYS),
      recoveryLoadSeconds: Number(loadSeconds.toFixed(3)),
      recoverySeconds: Number(recoverySeconds.toFixed(3)),
      memoryBytesPerKey,
    }),
  );
} finally {
  await store.close();
  await redis.stop();
  rmSync(dir, { recursive: true, force: true });
}
