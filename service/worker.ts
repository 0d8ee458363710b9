import { parentPort, workerData } from 'node:worker_threads';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { VigilOptions } from './config.js';
import { ControlFollower, type ControlEvent } from './control-follower.js';
import { jetStreamPartitionSource } from './event-source.js';
import { WorkerMetrics } from './metrics.js';
import { PartitionRunner } from './partition-runner.js';
import { RedisCheckpointStore } from './checkpoint-store.js';
import { Checkpointer } from './checkpointer.js';
import {
  restorePartitionParts,
  restoreRuleSet,
  type PartitionState,
  type RuleSet,
} from '../rules/index.js';
import { Publisher } from './publisher.js';
import { natsAlertSink, natsDeadLetterSink } from './sinks.js';
import { CONTROL_SUBJECT, markerSubject, Streams, tickSubject } from './subjects.js';

/** What the main thread gives a worker. */
export interface WorkerInit {
  readonly index: number;
  readonly options: VigilOptions;
  readonly partitions: readonly number[];
}

/** Messages between the main thread and a worker. */
export type ToWorker = { readonly op: 'metrics'; readonly id: number } | { readonly op: 'stop' };
export type FromWorker =
  | { readonly op: 'ready' }
  | { readonly op: 'metrics'; readonly id: number; readonly metrics: unknown }
  | { readonly op: 'stopped' }
  /** Whether the worker's last checkpoints succeeded (readiness shows it). */
  | { readonly op: 'checkpoints'; readonly ok: boolean }
  | { readonly op: 'log'; readonly level: 'info' | 'warn' | 'error'; readonly message: string };

const encoder = new TextEncoder();

async function main(init: WorkerInit): Promise<void> {
  const port = parentPort;
  if (port === null) throw new Error('worker.ts runs in a worker thread');
  const post = (m: FromWorker): void => port.postMessage(m);
  const log = (level: 'info' | 'warn' | 'error', message: string): void =>
    post({ op: 'log', level, message: `worker ${init.index}: ${message}` });
  const o = init.options;
  const metrics = new WorkerMetrics();
  const w = String(init.index);
  metrics.ready.set({ worker: w }, 0);

  const nc = await connect({
    servers: o.natsUrl,
    name: `vigil-worker-${init.index}`,
    noAsyncTraces: true,
    maxReconnectAttempts: -1,
  });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const publisher = new Publisher(js, o.maxInFlightPublishes, (subject, err) =>
    log('warn', `publish to ${subject} failed, retrying: ${(err as Error).message}`),
  );
  const alerts = natsAlertSink(publisher);
  const deadLetters = natsDeadLetterSink(publisher);

  // The highest marker already in each partition's log, so a restart does not write them again.
  const lastMarker = new Map<number, number>();
  for (const p of init.partitions) {
    const last = await jsm.streams
      .getMessage(Streams.events, { last_by_subj: markerSubject(p) })
      .catch(() => null);
    let seq = 0;
    try {
      seq = last ? Number((last.json() as { controlSeq?: unknown }).controlSeq) || 0 : 0;
    } catch {
      seq = 0;
    }
    lastMarker.set(p, seq);
  }

  const applied = new Map<number, number>(init.partitions.map((p) => [p, 0]));
  const onControl = async (e: ControlEvent): Promise<void> => {
    metrics.controlSeen.set({ worker: w }, e.seq);
    if (!e.outcome.ok) {
      // Every worker reports the same rejection under the same id; DLQ dedupe keeps one.
      metrics.dlq.inc({ reason: 'invalid-control' });
      await deadLetters.publish({
        reason: 'invalid-control',
        data: e.data,
        message: JSON.stringify(e.outcome.problems),
        source: { stream: Streams.control, subject: CONTROL_SUBJECT, seq: e.seq },
        id: `dlq-control-${e.seq}`,
      });
      return;
    }
    // The owner writes the marker into each of its partitions; Nats-Msg-Id makes a second writer harmless.
    for (const p of init.partitions) {
      if ((lastMarker.get(p) ?? 0) >= e.seq) continue;
      // A timed-out publish must not end the control loop: retry (Nats-Msg-Id makes it safe).
      for (let attempt = 0; ; attempt++) {
        try {
          await js.publish(
            markerSubject(p),
            encoder.encode(JSON.stringify({ vigil: 'epoch', controlSeq: e.seq })),
            { msgID: `epoch-${e.seq}-${p}` },
          );
          break;
        } catch (err) {
          log(
            'warn',
            `marker ${e.seq} for partition ${p} not stored, retrying: ${(err as Error).message}`,
          );
          await new Promise((r) => setTimeout(r, Math.min(2000, 100 * 2 ** attempt)));
        }
      }
      lastMarker.set(p, e.seq);
    }
  };
  const control = new ControlFollower(js, jsm, o.limits, onControl);

  const errorCounts = new Map<string, number>();
  const quarantined = new Set<string>();
  const onRuleError = (
    ruleId: string,
    version: number,
    controlSeq: number,
    message: string,
  ): void => {
    const k = `${ruleId}@${version}`;
    const n = (errorCounts.get(k) ?? 0) + 1;
    errorCounts.set(k, n);
    const id = `quarantine-${ruleId}-${version}-${controlSeq}`;
    if (n < o.quarantineAfterErrors || quarantined.has(id)) return;
    quarantined.add(id);
    errorCounts.delete(k);
    metrics.quarantines.inc({ rule: ruleId });
    log('warn', `rule ${ruleId} failed on ${n} events; pausing it through CONTROL`);
    const pause = {
      op: 'pause-rule',
      id: ruleId,
      meta: { actor: 'vigil', reason: `quarantined after ${n} errors; last: ${message}` },
    };
    void js
      .publish(CONTROL_SUBJECT, encoder.encode(JSON.stringify(pause)), { msgID: id })
      .catch((err: Error) =>
        log('error', `could not publish the quarantine of ${ruleId}: ${err.message}`),
      );
  };
  const onApplied = (p: number, seq: number): void => {
    applied.set(p, seq);
    control.release(Math.min(...applied.values()));
  };

  await control.start();
  const store = o.checkpointIntervalMs > 0 ? new RedisCheckpointStore(o.redisUrl) : undefined;
  const savedRuleSets = new Set<number>();
  const runners: PartitionRunner[] = [];
  const checkpointers: Checkpointer[] = [];
  for (const p of init.partitions) {
    // Restore from the last checkpoint: state, offset and the rule sets it was judged under.
    const stored = store ? await store.load(p) : undefined;
    let initialState: PartitionState | undefined;
    if (stored !== undefined) {
      const meta = JSON.parse(stored.meta) as {
        controlSeq: number;
        buffer: [number, number, unknown, unknown, number][];
      };
      const extra = new Map<number, RuleSet>();
      for (const seq of new Set([meta.controlSeq, ...meta.buffer.map((b) => b[4])])) {
        if (control.ruleSetAt(seq) !== undefined) continue;
        const json = await store?.loadRuleSet(seq);
        if (json !== undefined) extra.set(seq, restoreRuleSet(json, o.limits));
      }
      initialState = restorePartitionParts(
        stored.meta,
        stored.fields,
        (seq) => control.ruleSetAt(seq) ?? extra.get(seq),
        { outOfOrderMs: o.outOfOrderMs, limits: o.limits },
      );
      applied.set(p, initialState.ruleSet.controlSeq);
      metrics.controlApplied.set({ partition: String(p) }, initialState.ruleSet.controlSeq);
      log(
        'info',
        `partition ${p} restored at offset ${stored.offset}, control sequence ${stored.controlSeq}`,
      );
    }
    const source = await jetStreamPartitionSource(js, p, (stored?.offset ?? 0) + 1);
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
      admit: () => checkpointer?.admit() ?? Promise.resolve(),
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
          fence: () => 0,
          maxUncheckpointed: o.maxUncheckpointedRecords,
          timeoutMs: Math.max(2000, 5 * o.checkpointIntervalMs),
          fullEvery: o.checkpointFullEvery,
          savedRuleSets,
          log,
        },
        stored?.offset ?? 0,
      );
      checkpointers.push(checkpointer);
    }
    runner.start();
    runners.push(runner);
  }
  let checkpointsOk = true;
  const checkpointTimer =
    store !== undefined
      ? setInterval(() => {
          void Promise.all(checkpointers.map((c) => c.checkpoint())).then(() => {
            const ok = checkpointers.every((c) => c.healthy);
            if (ok !== checkpointsOk) post({ op: 'checkpoints', ok });
            checkpointsOk = ok;
          });
        }, o.checkpointIntervalMs)
      : undefined;
  metrics.ready.set({ worker: w }, 1);
  post({ op: 'ready' });

  // Idle partitions with pending timers get a tick, so absence rules fire on a quiet stream.
  const ticker =
    o.tickIntervalMs > 0
      ? setInterval(() => {
          for (const r of runners) {
            if (r.idleMs < o.tickIntervalMs || !r.waitingForTime) continue;
            const p = r.state.partition;
            js.publish(
              tickSubject(p),
              encoder.encode(JSON.stringify({ vigil: 'tick', ts: Date.now() })),
            ).catch((err: Error) => log('warn', `tick for partition ${p} failed: ${err.message}`));
          }
        }, o.tickIntervalMs)
      : undefined;

  port.on('message', (m: ToWorker) => {
    if (m.op === 'metrics') {
      void metrics.registry
        .getMetricsAsJSON()
        .then((json) => post({ op: 'metrics', id: m.id, metrics: json }));
      return;
    }
    void (async () => {
      if (ticker) clearInterval(ticker);
      if (checkpointTimer) clearInterval(checkpointTimer);
      metrics.ready.set({ worker: w }, 0);
      await Promise.all(runners.map((r) => r.stop()));
      // A last checkpoint on a clean stop, so a restart replays nothing.
      await Promise.all(checkpointers.map((c) => c.checkpoint()));
      await store?.close();
      await control.stop();
      await publisher.flush();
      await nc.drain();
      post({ op: 'stopped' });
      port.close();
    })();
  });
}

main(workerData as WorkerInit).catch((err: unknown) => {
  // Let the main thread see the failure as a worker error and restart the worker.
  throw err;
});
