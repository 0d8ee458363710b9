import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  DEFAULT_LIMITS,
  snapshotPartition,
  type CheckpointParts,
  type Rule,
  type RuleSet,
  type RuleSetJSON,
} from '../../rules/index.js';
import type {
  CheckpointStore,
  StoredCheckpoint,
} from '../../service/checkpoint/checkpoint-store.js';
import {
  Checkpointer,
  restoreCheckpoint,
  startCheckpointTurns,
} from '../../service/checkpoint/checkpointer.js';
import { MemoryCheckpointStore } from '../../service/checkpoint/memory-checkpoint-store.js';
import { WorkerMetrics } from '../../service/metrics/metrics.js';
import { MemoryStoreBackend } from '../../service/ownership/memory-backend.js';
import { checkpointAt } from '../contract/lease-store.contract.js';
import { Feed, ruleSetOf, upsert } from '../rules/harness.js';

/** A checkpoint store whose link can go down (calls fail) or stall (calls hang); it records the writes that reached it. */
class FlakyCheckpointStore implements CheckpointStore {
  mode: 'up' | 'down' | 'stalled' = 'up';
  /** Rule-set writes fail (the rest works). */
  ruleSetsDown = false;
  readonly saves: { partition: number; parts: CheckpointParts; fence: number }[] = [];
  readonly ruleSetSaves: number[] = [];
  constructor(private readonly inner: CheckpointStore) {}
  private call<T>(fn: () => Promise<T>): Promise<T> {
    if (this.mode === 'down') return Promise.reject(new Error('connection refused'));
    if (this.mode === 'stalled') return new Promise<T>(() => {});
    return fn();
  }
  load = (p: number): Promise<StoredCheckpoint | undefined> => this.call(() => this.inner.load(p));
  forSpace = (space: string): CheckpointStore => this.inner.forSpace(space);
  loadOffset = (p: number): Promise<number> => this.call(() => this.inner.loadOffset(p));
  save = (partition: number, parts: CheckpointParts, fence: number): Promise<void> =>
    this.call(async () => {
      await this.inner.save(partition, parts, fence);
      this.saves.push({ partition, parts, fence });
    });
  saveRuleSet = (seq: number, text: string): Promise<void> =>
    this.call(async () => {
      this.ruleSetSaves.push(seq);
      if (this.ruleSetsDown) throw new Error('connection refused');
      await this.inner.saveRuleSet(seq, text);
    });
  loadRuleSet = (seq: number): Promise<RuleSetJSON | undefined> =>
    this.call(() => this.inner.loadRuleSet(seq));
  loadControlSeqs = (n: number): Promise<number[]> =>
    this.call(() => this.inner.loadControlSeqs(n));
  close = (): Promise<void> => this.inner.close();
}

const rule: Rule = {
  id: 'big-spend',
  on: ['payment'],
  key: 'card',
  when: { all: [] },
  pattern: {
    kind: 'threshold',
    aggregate: 'sum',
    field: 'amount',
    window: 60_000,
    operator: '>',
    value: 1e9,
  },
} as Rule;

let backend: MemoryStoreBackend;
let store: FlakyCheckpointStore;
let rs: RuleSet;
let metrics: WorkerMetrics;
let warnings: string[];

beforeEach(() => {
  backend = new MemoryStoreBackend();
  store = new FlakyCheckpointStore(new MemoryCheckpointStore(backend));
  rs = ruleSetOf(upsert(rule));
  metrics = new WorkerMetrics();
  warnings = [];
});

afterEach(() => {
  vi.useRealTimers();
});

/** A partition fed by hand, and its checkpointer. */
function partition(
  o: {
    p?: number;
    fence?: () => number;
    settled?: () => Promise<void>;
    onFenced?: () => void;
    maxUncheckpointed?: number;
    timeoutMs?: number;
    savedRuleSets?: Map<number, Promise<void>>;
  } = {},
) {
  const feed = new Feed(rs);
  let ts = 1000;
  const pay = (card: string, amount = 1): void =>
    void feed.event({ type: 'payment', card, amount, ts: ts++ }, card);
  // Pattern rules buffer an event until event time passes it: a tick releases the last ones.
  const release = (): void => void feed.tick(ts++);
  const checkpointer = new Checkpointer(
    () => feed.state,
    (fn) => fn(),
    {
      partition: o.p ?? 3,
      store,
      metrics,
      settled: o.settled ?? (() => Promise.resolve()),
      fence: o.fence ?? (() => 1),
      ...(o.onFenced === undefined ? {} : { onFenced: o.onFenced }),
      maxUncheckpointed: o.maxUncheckpointed ?? 1000,
      timeoutMs: o.timeoutMs ?? 5000,
      fullEvery: 0,
      savedRuleSets: o.savedRuleSets ?? new Map(),
      log: (_level, message) => void warnings.push(message),
    },
    0,
  );
  return { feed, pay, release, checkpointer };
}

const failures = async (reason: string): Promise<number> =>
  (await metrics.checkpointFailures.get()).values
    .filter((v) => v.labels.reason === reason)
    .reduce((n, v) => n + v.value, 0);

describe('Checkpointer', () => {
  it('writes the changed keys under the lease token, only after every publish the checkpoint covers is acknowledged', async () => {
    let ack = (): void => {};
    let acked = Promise.resolve();
    const { feed, pay, release, checkpointer } = partition({
      settled: () => acked,
      fence: () => 7,
    });
    // Nothing read yet: nothing to write.
    expect(await checkpointer.checkpoint()).toBe(true);
    expect(store.saves).toHaveLength(0);
    pay('c0');
    pay('c1');
    release();
    acked = new Promise((r) => (ack = r));
    const written = checkpointer.checkpoint();
    await new Promise((r) => setTimeout(r, 10));
    expect(store.saves).toHaveLength(0);
    expect(await store.loadOffset(3)).toBe(0);
    ack();
    expect(await written).toBe(true);
    expect(checkpointer.healthy).toBe(true);
    expect(store.saves.map((s) => [s.partition, s.fence, s.parts.offset])).toEqual([[3, 7, 3]]);
    expect(store.saves[0]?.parts.upserts.map(([k]) => k).sort()).toEqual(['c0', 'c1']);
    // The rule set in force is stored before the checkpoint that needs it.
    expect(store.ruleSetSaves).toEqual([rs.controlSeq]);
    expect(await store.loadRuleSet(rs.controlSeq)).toBeDefined();
    // Unchanged since: nothing written. One key changed: only it.
    expect(await checkpointer.checkpoint()).toBe(true);
    expect(store.saves).toHaveLength(1);
    pay('c1');
    release();
    expect(await checkpointer.checkpoint()).toBe(true);
    expect(store.saves[1]?.parts.upserts.map(([k]) => k)).toEqual(['c1']);
    expect((await metrics.checkpointOffset.get()).values[0]?.value).toBe(feed.state.offset);
    expect(store.ruleSetSaves).toEqual([rs.controlSeq]);
  });

  it('what it wrote restores to the same partition state', async () => {
    const { feed, pay, checkpointer } = partition();
    for (let i = 0; i < 30; i++) pay(`c${i % 7}`, i);
    await checkpointer.checkpoint();
    for (let i = 0; i < 10; i++) pay(`c${i % 3}`, 100 + i);
    await checkpointer.checkpoint();
    const restored = await restoreCheckpoint(
      store,
      3,
      (seq) => (seq === rs.controlSeq ? rs : undefined),
      {
        outOfOrderMs: 0,
        limits: DEFAULT_LIMITS,
      },
    );
    expect(restored?.offset).toBe(40);
    expect(snapshotPartition(restored?.state ?? feed.state)).toEqual(snapshotPartition(feed.state));
  });

  it('a write refused as fenced stops the partition: onFenced once, no checkpoint after, no backpressure', async () => {
    const onFenced = vi.fn();
    const { pay, checkpointer } = partition({ fence: () => 1, onFenced, maxUncheckpointed: 2 });
    // Another owner acquired the lease since: token 2 was handed out.
    backend.tokens.set(3, 2);
    pay('c0');
    expect(await checkpointer.checkpoint()).toBe(false);
    expect(onFenced).toHaveBeenCalledTimes(1);
    expect(await failures('fenced')).toBe(1);
    pay('c1');
    pay('c2');
    expect(await checkpointer.checkpoint()).toBe(false);
    expect(onFenced).toHaveBeenCalledTimes(1);
    expect(await failures('fenced')).toBe(1);
    expect(checkpointer.admit()).toBeUndefined();
    expect(await store.load(3)).toBeUndefined();
  });

  it('without leases (token 0), a refused write does not stop the partition', async () => {
    const onFenced = vi.fn();
    // A checkpoint further on than this partition is.
    await store.save(3, checkpointAt(100), 0);
    const { pay, checkpointer } = partition({ fence: () => 0, onFenced });
    pay('c0');
    expect(await checkpointer.checkpoint()).toBe(false);
    expect(onFenced).not.toHaveBeenCalled();
    expect(await failures('fenced')).toBe(1);
    // It goes on trying.
    pay('c1');
    expect(await checkpointer.checkpoint()).toBe(false);
    expect(await failures('fenced')).toBe(2);
  });

  it('a failed write hands its keys to the next one; records wait while too many are not covered, retried until the store answers', async () => {
    vi.useFakeTimers();
    const { feed, pay, release, checkpointer } = partition({ maxUncheckpointed: 4 });
    pay('c0');
    release();
    store.mode = 'down';
    expect(await checkpointer.checkpoint()).toBe(false);
    expect(checkpointer.healthy).toBe(false);
    expect(await failures('store')).toBe(1);
    expect(checkpointer.admit()).toBeUndefined();
    pay('c1');
    pay('c2');
    release();
    // 4 records past the last checkpoint: the partition waits, retrying every 200 ms.
    const waiting = checkpointer.admit();
    expect(waiting).toBeInstanceOf(Promise);
    let admitted = false;
    void waiting?.then(() => (admitted = true));
    await vi.advanceTimersByTimeAsync(1000);
    expect(admitted).toBe(false);
    expect(await failures('store')).toBeGreaterThanOrEqual(5);
    store.mode = 'up';
    await vi.advanceTimersByTimeAsync(200);
    expect(admitted).toBe(true);
    expect(checkpointer.healthy).toBe(true);
    // c0, whose write failed, came with the next one.
    const stored = await store.load(3);
    expect(stored?.offset).toBe(feed.state.offset);
    expect([...new Map(stored?.fields).keys()].sort()).toEqual(['c0', 'c1', 'c2']);
  });

  it('a partition being stopped is not held back (drain), and a closed checkpointer writes nothing', async () => {
    const { pay, checkpointer } = partition({ maxUncheckpointed: 1 });
    store.mode = 'down';
    pay('c0');
    expect(checkpointer.admit()).toBeInstanceOf(Promise);
    checkpointer.drain();
    expect(checkpointer.admit()).toBeUndefined();
    store.mode = 'up';
    expect(await checkpointer.checkpoint()).toBe(true);
    pay('c1');
    await checkpointer.close();
    expect(await checkpointer.checkpoint()).toBe(false);
    expect(store.saves).toHaveLength(1);
  });

  it('a write the store does not answer within timeoutMs counts as failed', async () => {
    vi.useFakeTimers();
    const { pay, checkpointer } = partition({ timeoutMs: 2000 });
    pay('c0');
    store.mode = 'stalled';
    let result: boolean | undefined;
    void checkpointer.checkpoint().then((r) => (result = r));
    await vi.advanceTimersByTimeAsync(1900);
    expect(result).toBeUndefined();
    await vi.advanceTimersByTimeAsync(200);
    expect(result).toBe(false);
    expect(checkpointer.healthy).toBe(false);
    expect(warnings.some((w) => w.includes('not written within 2000 ms'))).toBe(true);
  });

  it('a rule set is written once for the partitions that share it, and again after a failed write', async () => {
    const savedRuleSets = new Map<number, Promise<void>>();
    const a = partition({ p: 0, savedRuleSets });
    const b = partition({ p: 1, savedRuleSets });
    a.pay('c0');
    b.pay('c0');
    store.ruleSetsDown = true;
    expect(await a.checkpointer.checkpoint()).toBe(false);
    expect(store.saves).toHaveLength(0);
    expect(savedRuleSets.size).toBe(0);
    store.ruleSetsDown = false;
    const both = await Promise.all([a.checkpointer.checkpoint(), b.checkpointer.checkpoint()]);
    expect(both).toEqual([true, true]);
    expect(store.ruleSetSaves).toEqual([rs.controlSeq, rs.controlSeq]);
    expect(await store.loadOffset(0)).toBe(1);
    expect(await store.loadOffset(1)).toBe(1);
  });
});

describe('startCheckpointTurns', () => {
  it('checkpoints each partition run here once per interval, in turn, and reports when health changes', async () => {
    vi.useFakeTimers();
    const runs = new Map([0, 2].map((p) => [p, partition({ p })]));
    for (const r of runs.values()) r.pay('c0');
    const health: boolean[] = [];
    const stop = startCheckpointTurns({
      intervalMs: 400,
      partitions: 4,
      checkpointersOf: (p) => {
        const c = runs.get(p)?.checkpointer;
        return c === undefined ? [] : [c];
      },
      onHealth: (ok) => void health.push(ok),
    });
    const written = (): number[] => store.saves.map((s) => s.partition);
    await vi.advanceTimersByTimeAsync(100);
    expect(written()).toEqual([0]);
    await vi.advanceTimersByTimeAsync(200);
    expect(written()).toEqual([0, 2]);
    for (const r of runs.values()) r.pay('c1');
    await vi.advanceTimersByTimeAsync(400);
    expect(written()).toEqual([0, 2, 0, 2]);
    expect(health).toEqual([]);
    store.mode = 'down';
    for (const r of runs.values()) r.pay('c2');
    await vi.advanceTimersByTimeAsync(400);
    expect(health).toEqual([false]);
    store.mode = 'up';
    await vi.advanceTimersByTimeAsync(200);
    // Partition 2 still failed last: not healthy until it has written too.
    expect(written()).toEqual([0, 2, 0, 2, 0]);
    expect(health).toEqual([false]);
    await vi.advanceTimersByTimeAsync(200);
    expect(health).toEqual([false, true]);
    stop();
    for (const r of runs.values()) r.pay('c3');
    await vi.advanceTimersByTimeAsync(1000);
    expect(written()).toEqual([0, 2, 0, 2, 0, 2]);
  });
});
