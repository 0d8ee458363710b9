import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPartition, emptyRuleSet, type CheckpointParts } from '../../rules/index.js';
import {
  RedisCheckpointStore,
  type CheckpointStore,
  type StoredCheckpoint,
} from '../../service/checkpoint/checkpoint-store.js';
import { CheckpointLoader, type LoadedCheckpoint } from '../../service/checkpoint/checkpointer.js';
import { ensureStreams, jetStreamPartitionSource, type EventSource } from '../../service/index.js';
import {
  eventSubject,
  partitionedEventSubject,
  partitionOf,
  Streams,
} from '../../protocol/index.js';
import { openPartition, type RestoredPartition } from '../../service/ingest/partition-open.js';
import type { PartitionConsumer } from '../../service/ingest/partition-consumer.js';
import { startTestServers, type TestServers } from './servers.js';

// openPartition creates a partition's consumer from the checkpoint's offset, read ahead of the
// checkpoint itself. These tests pin down where the consumer starts, also when the checkpoint
// moved between the two reads (no other owner writes it under a lease, but a stale lease could).

const P = 4;
const PART = 1;
let servers: TestServers;
let store: RedisCheckpointStore;
/** Stream sequences of the records of partition PART, in order. */
const seqs: number[] = [];

/** A store whose offset read answers an older offset than its checkpoint holds. */
class StaleOffsetStore implements CheckpointStore {
  constructor(
    private readonly inner: CheckpointStore,
    private readonly staleOffset: number,
  ) {}
  load(p: number): Promise<StoredCheckpoint | undefined> {
    return this.inner.load(p);
  }
  loadOffset(): Promise<number> {
    return Promise.resolve(this.staleOffset);
  }
  save: CheckpointStore['save'] = (...a) => this.inner.save(...a);
  saveRuleSet: CheckpointStore['saveRuleSet'] = (...a) => this.inner.saveRuleSet(...a);
  loadRuleSet: CheckpointStore['loadRuleSet'] = (...a) => this.inner.loadRuleSet(...a);
  loadControlSeqs: CheckpointStore['loadControlSeqs'] = (...a) => this.inner.loadControlSeqs(...a);
  forSpace: CheckpointStore['forSpace'] = (space) => this.inner.forSpace(space);
  close(): Promise<void> {
    return Promise.resolve();
  }
}

const parts = (offset: number): CheckpointParts => ({
  offset,
  controlSeq: 0,
  meta: `{"offset":${offset}}`,
  upserts: [],
  deletes: [],
  buffered: [],
  released: [],
  bufferedAfter: 0,
  releasedChunks: new Map(),
  lineages: [],
  lineagesRemoved: [],
  full: true,
  changed: [],
});

const restore = (loaded: LoadedCheckpoint): Promise<RestoredPartition> =>
  Promise.resolve({
    state: createPartition(emptyRuleSet(), { partition: PART, outOfOrderMs: 0 }),
    offset: loaded.stored.offset,
    timings: { loadMs: 0, restoreMs: 0, keys: 0 },
  });

/** The sequences of the next `n` records of a source (fewer if it ends first). */
async function take(source: EventSource, n: number): Promise<number[]> {
  const out: number[] = [];
  while (out.length < n) {
    const r = source.next();
    if (r !== undefined) out.push(r.seq);
    else if (source.ended) break;
    else await source.wait();
  }
  return out;
}

/** Publishes `n` events of `key` into partition PART; their stream sequences. */
async function publishTo(key: string, n: number): Promise<number[]> {
  const acks = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      servers.js.publish(partitionedEventSubject(key, PART), JSON.stringify({ type: 'x', i })),
    ),
  );
  return acks.map((a) => a.seq);
}

/** The partition's consumers on the server (PartitionConsumer names them v<p>_…). */
async function ourConsumers(): Promise<string[]> {
  return (await servers.jsm.consumers.list(Streams.events).next())
    .map((c) => c.name)
    .filter((n) => n.startsWith(`v${PART}_`));
}

async function firstSeq(s: CheckpointStore): Promise<number | undefined> {
  const loader = new CheckpointLoader(s);
  loader.prefetch(PART);
  const opened = await openPartition({
    partition: PART,
    nats: servers,
    checkpoints: { loader, restore },
    dropped: () => false,
  });
  if (opened === undefined) throw new Error('the partition was not opened');
  try {
    return (await take(opened.source, 1))[0];
  } finally {
    await opened.source.stop();
  }
}

beforeAll(async () => {
  servers = await startTestServers({ partitions: P, redis: true });
  await ensureStreams(servers.jsm, 60_000, P);
  store = new RedisCheckpointStore(servers.redis?.url as string, `t${Date.now()}:`);
  // Events of every partition, so that the filter, not the stream's order, decides what is read.
  for (let i = 0; seqs.length < 12; i++) {
    const key = `k${i}`;
    const ack = await servers.js.publish(eventSubject(key), JSON.stringify({ type: 'x', i }));
    if (partitionOf(key, P) === PART) seqs.push(ack.seq);
  }
}, 60_000);

afterAll(async () => {
  await store?.close();
  await servers?.stop();
});

describe('openPartition (real nats-server and redis-server)', () => {
  it('reads the partition from the record after its checkpoint', async () => {
    const at = seqs[5] as number;
    await store.save(PART, parts(at), 0);
    expect(await firstSeq(store)).toBe(seqs[6]);
  });

  it('makes the consumer again when the checkpoint moved after its offset was read', async () => {
    const stale = seqs[2] as number;
    const at = seqs[8] as number;
    await store.save(PART, parts(at), 0);
    // From the stale offset the first record would be seqs[3].
    expect(await firstSeq(new StaleOffsetStore(store, stale))).toBe(seqs[9]);
  });

  it("hands out the partition's records in log order, and none once stopped", async () => {
    const source = await jetStreamPartitionSource(servers, PART, 1);
    try {
      expect(await take(source, 10)).toEqual(seqs.slice(0, 10));
      // The last two have arrived (or will): stop() drops what was not taken.
      await new Promise((r) => setTimeout(r, 200));
    } finally {
      await source.stop();
    }
    expect(source.next()).toBeUndefined();
    expect(source.ended).toBe(true);
    await source.wait();
  });

  it('hands out thousands of records waiting at once, in log order, each once', async () => {
    // Records arrive faster than they are taken: the source's queue drops what was taken as it goes.
    const key = 'bulk';
    const published: number[] = [];
    for (let i = 0; i < 3000; i += 500) {
      const acks = await Promise.all(
        Array.from({ length: 500 }, (_, j) =>
          servers.js.publish(
            partitionedEventSubject(key, PART),
            JSON.stringify({ type: 'x', i: i + j }),
          ),
        ),
      );
      published.push(...acks.map((a) => a.seq));
    }
    const from = published[0] as number;
    const source = await jetStreamPartitionSource(servers, PART, from);
    try {
      // Let most of them arrive before any is taken.
      await new Promise((r) => setTimeout(r, 500));
      expect(await take(source, published.length)).toEqual(published);
    } finally {
      await source.stop();
    }
  });

  it('keeps no record it has handed out, while more wait', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const source = await jetStreamPartitionSource(servers, PART, 1);
    try {
      // Let the partition's records arrive, so that taking one leaves others queued.
      await new Promise((r) => setTimeout(r, 300));
      const taken = (() => {
        const r = source.next();
        return r === undefined ? undefined : new WeakRef(r);
      })();
      expect(taken).toBeDefined();
      expect(source.next()).toBeDefined();
      await new Promise((r) => setImmediate(r));
      gc();
      // Handled records (payload and subject with them) are garbage at once, not kept until the
      // queue next empties.
      expect(taken?.deref()).toBeUndefined();
    } finally {
      await source.stop();
    }
  });

  it('stops a source no one has read (a partition abandoned while it opened)', async () => {
    for (const from of [1, (seqs[seqs.length - 1] as number) + 1]) {
      const source = await jetStreamPartitionSource(servers, PART, from);
      // Let its consumer pull what it can.
      await new Promise((r) => setTimeout(r, 200));
      const stopped = await Promise.race([
        source.stop().then(() => 'stopped'),
        new Promise((r) => setTimeout(() => r('still waiting after 5 s'), 5000)),
      ]);
      expect({ from, stopped }).toEqual({ from, stopped: 'stopped' });
    }
  });
  it('reads on, none missed or twice, when its consumer is deleted under it; stop() removes it', async () => {
    const publish = (n: number): Promise<number[]> => publishTo('gone', n);
    const first = await publish(50);
    const source = await jetStreamPartitionSource(servers, PART, first[0] as number);
    try {
      expect(await take(source, 50)).toEqual(first);
      const before = await ourConsumers();
      expect(before).toHaveLength(1);
      await servers.jsm.consumers.delete(Streams.events, before[0] as string);
      const second = await publish(50);
      expect(await take(source, 50)).toEqual(second);
      const after = await ourConsumers();
      expect(after).toHaveLength(1);
      expect(after).not.toEqual(before);
    } finally {
      await source.stop();
    }
    expect(await ourConsumers()).toEqual([]);
  });
  it('ends with an error that says why when its connection closes', async () => {
    const nc = await connect({ servers: servers.nats.url });
    const source = await jetStreamPartitionSource({ nc, jsm: await jetstreamManager(nc) }, PART, 1);
    try {
      expect(await take(source, 3)).toEqual(seqs.slice(0, 3));
      await nc.close();
      await expect(take(source, Number.MAX_SAFE_INTEGER)).rejects.toThrow(/connection closed/);
      expect(source.ended).toBe(true);
    } finally {
      await source.stop();
    }
  });
  it('holds at most a window of records that are not taken, and hands them all out in order', async () => {
    const published: number[] = [];
    for (let i = 0; i < 6000; i += 500) {
      const acks = await Promise.all(
        Array.from({ length: 500 }, (_, j) =>
          servers.js.publish(
            partitionedEventSubject('window', PART),
            JSON.stringify({ type: 'x', i: i + j }),
          ),
        ),
      );
      published.push(...acks.map((a) => a.seq));
    }
    const source = (await jetStreamPartitionSource(
      servers,
      PART,
      published[0] as number,
    )) as PartitionConsumer;
    try {
      // Nothing is taken: the server could deliver all 6,000 meanwhile, the window lets 2,000 in.
      await new Promise((r) => setTimeout(r, 700));
      expect(source.queued).toBe(2000);
      expect(await take(source, published.length)).toEqual(published);
    } finally {
      await source.stop();
    }
  });
  it('keeps its consumer over a reconnect to a server that kept it, none missed or twice', async () => {
    const nc = await connect({ servers: servers.nats.url });
    const publish = (n: number): Promise<number[]> => publishTo('blip', n);
    const first = await publish(20);
    const source = await jetStreamPartitionSource(
      { nc, jsm: await jetstreamManager(nc) },
      PART,
      first[0] as number,
    );
    try {
      expect(await take(source, 20)).toEqual(first);
      const before = await ourConsumers();
      const back = new Promise<void>((resolve) => {
        void (async () => {
          for await (const s of nc.status()) if (s.type === 'reconnect') return resolve();
        })();
      });
      await nc.reconnect();
      await back;
      const second = await publish(20);
      expect(await take(source, 20)).toEqual(second);
      expect(await ourConsumers()).toEqual(before);
    } finally {
      await source.stop();
      await nc.close();
    }
  });
});
