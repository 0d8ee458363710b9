import { parentPort, workerData } from 'node:worker_threads';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { ControlFollower, type ControlEvent } from '../../jetstream/index.js';
import { GC_REPORT_MS, watchGcPauses } from '../metrics/gc-pauses.js';
import { WorkerMetrics } from '../metrics/metrics.js';
import { natsConnection } from '../../jetstream/index.js';
import { watchConnection } from '../ingest/connection-watch.js';
import { PartitionRunner } from './partition-runner.js';
import { RedisCheckpointStore } from '../checkpoint/checkpoint-store.js';
import {
  Checkpointer,
  CheckpointLoader,
  restoreLoaded,
  startCheckpointTurns,
  type LoadedCheckpoint,
} from '../checkpoint/checkpointer.js';
import { retryTransient } from '../transient.js';
import { openPartition } from '../ingest/partition-open.js';
import { Publisher } from '../output/publisher.js';
import { natsAlertSink, natsDeadLetterSink } from '../output/sinks.js';
import { MarkerWriter } from '../control/marker-writer.js';
import { RuleQuarantine } from '../control/quarantine.js';
import { CONTROL_SUBJECT, Streams } from '../../protocol/index.js';
import { startIdleTicks } from '../ingest/idle-ticks.js';
import { startIdleGc } from './idle-gc.js';
import type {
  FromWorker,
  PartitionGrant,
  PartitionStopReason,
  ToWorker,
  WorkerInit,
} from './worker-protocol.js';

/** How long every partition of a worker must have read nothing before it collects its heap after expiry. */
const IDLE_GC_MS = 3000;

/** A partition this worker runs (or is starting). */
interface Owned {
  readonly partition: number;
  readonly token: number;
  runner: PartitionRunner | undefined;
  checkpointer: Checkpointer | undefined;
  /** Set the moment a stop arrives: no more markers, and a start under way gives up. */
  dropped: boolean;
}

async function main(init: WorkerInit): Promise<void> {
  if (parentPort === null) throw new Error('worker.ts runs in a worker thread');
  const port = parentPort;
  const post = (m: FromWorker): void => port.postMessage(m);
  const log = (level: 'info' | 'warn' | 'error', message: string): void =>
    post({ op: 'log', level, message: `worker ${init.index}: ${message}` });
  const o = init.options;
  const metrics = new WorkerMetrics();
  const w = String(init.index);
  metrics.ready.set({ worker: w }, 0);
  metrics.leasesHeld.set({ worker: w }, 0);
  const stopWatchingGc = watchGcPauses((pause) => {
    metrics.gcPause.observe({ worker: w, kind: pause.kind }, pause.ms / 1000);
    if (pause.ms >= GC_REPORT_MS) post({ op: 'gc-pause', pause });
  });

  const owned = new Map<number, Owned>();
  // Starts and stops of one partition run in the order they arrive; partitions run side by side.
  const chains = new Map<number, Promise<void>>();
  const inOrder = (p: number, fn: () => Promise<void>): void => {
    const next = (chains.get(p) ?? Promise.resolve())
      .then(fn)
      .catch((err: Error) => log('error', `partition ${p}: ${err.stack ?? err.message}`));
    chains.set(p, next);
    void next.then(() => chains.get(p) === next && chains.delete(p));
  };
  let stopping: Promise<void> | undefined;
  const store = o.checkpointIntervalMs > 0 ? new RedisCheckpointStore(o.redisUrl) : undefined;
  // Checkpoints are read from the moment a partition arrives: at start-up while the worker
  // still connects to NATS and catches up with CONTROL, and while other partitions restore.
  const loader = store === undefined ? undefined : new CheckpointLoader(store);
  for (const grant of init.partitions) loader?.prefetch(grant.partition);
  let streamsChecked = (): void => {};
  const streams = init.streamsReady
    ? Promise.resolve()
    : new Promise<void>((resolve) => (streamsChecked = resolve));
  let setUp = (): void => {};
  // Listen at once: the pool may send partitions while the worker is still connecting.
  const ready = new Promise<void>((resolve) => (setUp = resolve));
  port.on('message', (m: ToWorker) => {
    if (m.op === 'metrics') {
      void metrics.registry
        .getMetricsAsJSON()
        .then((json) => post({ op: 'metrics', id: m.id, metrics: json }));
    } else if (m.op === 'start-partition') {
      // Only with nothing under way for the partition: a stop before this start would write a
      // final checkpoint after the read.
      if (!chains.has(m.partition) && !owned.has(m.partition)) loader?.prefetch(m.partition);
      inOrder(m.partition, async () => {
        await ready;
        await startPartition(m, true).catch(crash);
      });
    } else if (m.op === 'stop-partition') {
      loader?.forget(m.partition);
      const own = owned.get(m.partition);
      if (own) {
        own.dropped = true;
        markers.remove(m.partition);
      }
      inOrder(m.partition, async () => {
        await ready;
        await stopPartition(m.partition, m.reason);
      });
    } else if (m.op === 'streams-ready') streamsChecked();
    else if (m.op === 'stop') stopping ??= ready.then(() => stopAll());
  });

  const nc = await connect({
    ...natsConnection(o),
    name: `vigil-worker-${init.index}`,
    noAsyncTraces: true,
    maxReconnectAttempts: -1,
  });
  // Readiness means judging events now: a worker without NATS judges nothing. Each change is
  // logged once, where the failures it causes (ticks, markers, pulls) would repeat.
  const unwatchNats = watchConnection(nc, (e) => {
    if (e === 'closed') return;
    const connected = e === 'reconnect';
    log(
      connected ? 'info' : 'warn',
      connected ? 'NATS reconnected' : 'NATS disconnected; judging nothing until it is back',
    );
    post({ op: 'nats', connected });
  });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const publisher = new Publisher(js, o.maxInFlightPublishes, (subject, err) =>
    log('warn', `publish to ${subject} failed, retrying: ${(err as Error).message}`),
  );
  const alerts = natsAlertSink(publisher);
  const deadLetters = natsDeadLetterSink(publisher, (reason) => metrics.dlq.inc({ reason }));

  // Used by the message handler above only for partitions in `owned`, i.e. once set up.
  const markers = new MarkerWriter(js, jsm, log);

  const onControl = async (e: ControlEvent): Promise<void> => {
    metrics.controlSeen.set({ worker: w }, e.seq);
    if (!e.outcome.ok) {
      // Every worker reports the same rejection under the same id; DLQ dedupe keeps one, and
      // vigil_dlq_total counts that one.
      await deadLetters.publish({
        reason: 'invalid-control',
        data: e.data,
        message: JSON.stringify(e.outcome.problems),
        source: { stream: Streams.control, subject: CONTROL_SUBJECT, seq: e.seq },
        id: `dlq-control-${e.seq}`,
      });
      return;
    }
    await markers.accept(e.seq);
  };
  const control = new ControlFollower(js, jsm, o.limits, onControl);

  const { onRuleError } = new RuleQuarantine(js, o.quarantineAfterErrors, metrics, log);

  // Rule sets are kept from the oldest control sequence any partition may still need: the one
  // in force on each partition run here, and for every other partition the one of its
  // checkpoint (this worker may be handed it at any time, and replays its markers from there).
  const applied = new Map<number, number>();
  let checkpointedSeqs: number[] | undefined;
  const releaseRuleSets = (): void => {
    let floor = Infinity;
    if (store !== undefined) {
      if (checkpointedSeqs === undefined) return;
      checkpointedSeqs.forEach((seq, p) => {
        floor = Math.min(floor, applied.get(p) ?? seq);
      });
    } else for (const seq of applied.values()) floor = Math.min(floor, seq);
    if (Number.isFinite(floor)) control.release(floor);
  };
  const onApplied = (p: number, seq: number, activationMs: number | undefined): void => {
    applied.set(p, seq);
    releaseRuleSets();
    post({ op: 'applied', partition: p, controlSeq: seq, activationMs });
  };

  await streams;
  await control.start();
  const refreshCheckpointedSeqs = async (): Promise<void> => {
    // Checkpoints only move forward, so a value read earlier is a safe lower bound.
    checkpointedSeqs = (await store?.loadControlSeqs(o.partitions)) ?? checkpointedSeqs;
    releaseRuleSets();
  };
  const savedRuleSets = new Map<number, Promise<void>>();
  const leased = (): number => [...owned.values()].filter((x) => x.token > 0 && x.runner).length;

  // Restores hold the thread for a while each: one at a time, with a turn of the event loop
  // between two (immediates queued together run back to back, without reading any socket), so
  // that the replies to the consumers being created, and to Redis, are read in between.
  let restoring = Promise.resolve();
  const inTurn = async <T>(fn: () => Promise<T>): Promise<T> => {
    const previous = restoring;
    let done = (): void => {};
    restoring = new Promise<void>((r) => (done = r));
    try {
      await previous;
      await new Promise((r) => setImmediate(r));
      return await fn();
    } finally {
      done();
    }
  };

  const checkpoints =
    store === undefined || loader === undefined
      ? undefined
      : {
          loader,
          restore: (loaded: LoadedCheckpoint) =>
            inTurn(() => restoreLoaded(store, loaded, (seq) => control.ruleSetAt(seq), o)),
        };

  async function startPartition(grant: PartitionGrant, handedOver: boolean): Promise<void> {
    const p = grant.partition;
    if (owned.has(p)) return;
    const own: Owned = {
      partition: p,
      token: grant.token,
      runner: undefined,
      checkpointer: undefined,
      dropped: false,
    };
    owned.set(p, own);
    void markers.add(p, () => owned.get(p) === own && !own.dropped);
    const restoreStarted = performance.now();
    // A JetStream API call that times out on a saturated machine is tried again here: crashing
    // the thread would re-create every partition's consumer, more load on the same server.
    const opened = await retryTransient(
      () =>
        openPartition({ partition: p, nats: { nc, jsm }, checkpoints, dropped: () => own.dropped }),
      {
        abandoned: () => own.dropped,
        onRetry: (err, n, delayMs) =>
          log(
            'warn',
            `partition ${p}: opening it failed (${err.name}: ${err.message}, attempt ${n}); trying again in ${delayMs} ms`,
          ),
      },
    );
    if (opened === undefined) return;
    const { source, restored, consumerMs } = opened;
    const initialState = restored?.state;
    if (restored)
      log(
        'info',
        `partition ${p} restored at offset ${restored.offset}, control sequence ${initialState?.ruleSet.controlSeq}: ${restored.timings.keys} keys, ${Math.round(restored.timings.loadMs)} ms reading, ${Math.round(restored.timings.restoreMs)} ms restoring, ${Math.round(performance.now() - restoreStarted)} ms in all`,
      );
    if (own.dropped) {
      await source.stop();
      return;
    }
    applied.set(p, initialState?.ruleSet.controlSeq ?? 0);
    let checkpointer: Checkpointer | undefined;
    const runner = new PartitionRunner({
      partition: p,
      partitions: o.partitions,
      outOfOrderMs: o.outOfOrderMs,
      limits: o.limits,
      source,
      control,
      alerts,
      deadLetters,
      metrics,
      onRuleError,
      onApplied,
      initialState,
      admit: () => checkpointer?.admit(),
    });
    if (store !== undefined) {
      checkpointer = new Checkpointer(
        () => runner.state,
        (fn) => runner.atBoundary(fn),
        {
          partition: p,
          store,
          metrics,
          settled: () => publisher.settled(),
          fence: () => own.token,
          onFenced: () => {
            // A newer owner holds the lease: stop now, without a checkpoint.
            if (own.dropped) return;
            own.dropped = true;
            markers.remove(p);
            inOrder(p, async () => {
              if (owned.get(p) === own) await stopPartition(p, 'fenced');
            });
          },
          maxUncheckpointed: o.maxUncheckpointedRecords,
          timeoutMs: Math.max(2000, 5 * o.checkpointIntervalMs),
          fullEvery: o.checkpointFullEvery,
          savedRuleSets,
          log,
        },
        restored?.offset ?? 0,
      );
    }
    own.runner = runner;
    own.checkpointer = checkpointer;
    runner.start();
    if (own.token > 0) {
      metrics.leasesHeld.set({ worker: w }, leased());
      if (handedOver) metrics.leaseHandoffs.inc({ reason: 'acquired' });
    }
    post({
      op: 'partition-started',
      partition: p,
      loadMs: restored?.timings.loadMs ?? 0,
      restoreMs: restored?.timings.restoreMs ?? 0,
      consumerMs,
      keys: restored?.timings.keys ?? 0,
    });
  }

  async function stopPartition(p: number, reason: PartitionStopReason): Promise<void> {
    const own = owned.get(p);
    let checkpointed = false;
    if (own !== undefined) {
      own.dropped = true;
      markers.remove(p);
      if (reason === 'released') {
        // Stop reading, finish the record in flight, then a final checkpoint (it waits for
        // every alert to be acknowledged) so that the next owner replays nothing.
        own.checkpointer?.drain();
        await own.runner?.stop();
        // A periodic checkpoint under way may have been taken before the last records: a
        // second one covers them (and costs nothing when there is nothing new).
        await own.checkpointer?.checkpoint();
        checkpointed = (await own.checkpointer?.checkpoint()) ?? own.runner !== undefined;
        await own.checkpointer?.close();
      } else {
        // The lease is gone: no more records, alerts, markers or checkpoints from here. Closing
        // the checkpointer first also lets a partition held back by backpressure stop.
        const closing = own.checkpointer?.close();
        await own.runner?.stop();
        await closing;
      }
      owned.delete(p);
      applied.delete(p);
      const partition = String(p);
      for (const g of [
        metrics.offset,
        metrics.lag,
        metrics.watermarkLag,
        metrics.liveKeys,
        metrics.liveStates,
        metrics.controlApplied,
        metrics.checkpointLast,
        metrics.checkpointOffset,
      ])
        g.remove({ partition });
      if (own.token > 0) {
        metrics.leasesHeld.set({ worker: w }, leased());
        metrics.leaseHandoffs.inc({ reason: reason === 'released' ? 'released' : 'lost' });
      }
      log('info', `partition ${p} stopped (${reason})`);
    }
    post({ op: 'partition-stopped', partition: p, reason, checkpointed });
  }

  const stopCheckpoints =
    store === undefined
      ? () => {}
      : startCheckpointTurns({
          intervalMs: o.checkpointIntervalMs,
          partitions: o.partitions,
          checkpointerOf: (p) => {
            const own = owned.get(p);
            return own === undefined || own.dropped ? undefined : own.checkpointer;
          },
          onHealth: (ok) => post({ op: 'checkpoints', ok }),
        });
  const seqsTimer =
    store !== undefined
      ? setInterval(
          () => void refreshCheckpointedSeqs().catch(() => undefined),
          Math.max(5000, o.checkpointIntervalMs),
        )
      : undefined;
  // Not awaited: with Redis away the worker still starts (nothing is released until it answers).
  void refreshCheckpointedSeqs().catch(() => undefined);

  const stopTicks = startIdleTicks({
    intervalMs: o.tickIntervalMs,
    js,
    runners: () => [...owned.values()].flatMap((x) => (x.dropped ? [] : (x.runner ?? []))),
    log,
  });
  const stopIdleGc = startIdleGc({
    idleMs: IDLE_GC_MS,
    runners: () => [...owned.values()].flatMap((x) => (x.dropped ? [] : (x.runner ?? []))),
    log,
  });

  async function stopAll(): Promise<void> {
    stopTicks();
    stopIdleGc();
    unwatchNats();
    stopCheckpoints();
    if (seqsTimer) clearInterval(seqsTimer);
    metrics.ready.set({ worker: w }, 0);
    // A last checkpoint of every partition on a clean stop, so the next owner replays nothing.
    const all = [...owned.keys()];
    await Promise.all(
      all.map(
        (p) =>
          new Promise<void>((resolve) =>
            inOrder(p, async () => {
              await stopPartition(p, 'released');
              resolve();
            }),
          ),
      ),
    );
    await Promise.all([...chains.values()]);
    await store?.close();
    await control.stop();
    await publisher.flush();
    await nc.drain();
    stopWatchingGc();
    post({ op: 'stopped' });
    port.close();
  }

  const crash = (err: unknown): void => {
    // A partition that cannot start would be held and never run: end the thread, as a crash
    // would; the pool restarts it and the restore is tried again.
    setImmediate(() => {
      throw err;
    });
  };
  for (const grant of init.partitions)
    inOrder(grant.partition, () => startPartition(grant, false).catch(crash));
  metrics.ready.set({ worker: w }, 1);
  post({ op: 'ready' });
  setUp();
}

main(workerData as WorkerInit).catch((err: unknown) => {
  // Let the main thread see the failure as a worker error and restart the worker.
  throw err;
});
