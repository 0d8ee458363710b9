/** What the PartitionRunner tests share: a runner over an in-memory log, CONTROL and sinks, and the rules they run. */
import { vi } from 'vitest';
import { ControlFollower } from '../../jetstream/index.js';
import { partitionOf } from '../../protocol/index.js';
import { DEFAULT_LIMITS, type Rule } from '../../rules/index.js';
import { PartitionRunner, WorkerMetrics } from '../../service/index.js';
import { MemoryControlStream } from './memory-control-stream.js';
import { MemoryEventSource } from './memory-event-source.js';
import { RecordingAlertSink, RecordingDeadLetterSink } from './recording-sinks.js';

export const P = 1;
export const PARTITIONS = 4;
/** Keys of partition P, and one of another partition. */
const keys = Array.from({ length: 200 }, (_, i) => `k${i}`).filter(
  (k) => partitionOf(k, PARTITIONS) === P,
);
export const [K1, K2] = keys as [string, string];
export const OTHER = Array.from({ length: 200 }, (_, i) => `x${i}`).find(
  (k) => partitionOf(k, PARTITIONS) !== P,
) as string;

export const upsert = (rule: Rule) => ({ op: 'upsert-rule', rule });
export const every = (id: string, type = 'pay'): Rule => ({
  id,
  on: [type],
  when: { all: [{ fact: 'type', operator: 'equal', value: type }] },
  alert: { severity: 'low', title: `${id} {{id}}` },
});
export const big: Rule = {
  id: 'big',
  on: ['pay'],
  when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 100 }] },
};
/** Holds every `pay` event of a key for 10 s and never fires: events are buffered, keys have state. */
export const burst: Rule = {
  id: 'burst',
  on: ['pay'],
  pattern: { kind: 'threshold', aggregate: 'count', window: '10s', operator: '>=', value: 1000 },
};
export const noShip: Rule = {
  id: 'no-ship',
  on: ['order'],
  pattern: { kind: 'absence', within: 1000, expect: { on: ['ship'] } },
};
export const fragile: Rule = {
  id: 'fragile',
  on: ['probe'],
  when: { all: [{ fact: 'a', operator: 'in', value: { fact: 'b' } }] },
};

/** Lets the runner handle what it can now (it yields to the event loop between records). */
export const settle = () => new Promise((r) => setTimeout(r, 10));

export interface Setup {
  readonly control?: readonly unknown[];
  readonly outOfOrderMs?: number;
  /** CONTROL messages stored but not yet read by the worker. */
  readonly unread?: readonly unknown[];
  /** A key space's partition of the re-keying hop: it reads what the sources send. */
  readonly downstream?: string;
}

const running: PartitionRunner[] = [];

/** Stops every runner `setup` made (after each test). */
export async function stopRunners(): Promise<void> {
  await Promise.all(running.splice(0).map((r) => r.stop()));
  vi.useRealTimers();
}

export async function setup(s: Setup = {}) {
  const stream = new MemoryControlStream();
  for (const m of s.control ?? []) stream.append(m, 1000);
  const control = new ControlFollower(stream, DEFAULT_LIMITS, () => {});
  await control.start();
  if (s.unread !== undefined) {
    stream.pause();
    for (const m of s.unread) stream.append(m, 1000);
  }
  const source = new MemoryEventSource(P);
  const alerts = new RecordingAlertSink();
  const dead = new RecordingDeadLetterSink();
  const metrics = new WorkerMetrics();
  const applied: [number, number][] = [];
  const activation: (number | undefined)[] = [];
  const ruleErrors: string[] = [];
  let admitted = 0;
  let admit: () => Promise<void> | undefined = () => undefined;
  const runner = new PartitionRunner({
    partition: P,
    partitions: PARTITIONS,
    outOfOrderMs: s.outOfOrderMs ?? 0,
    limits: DEFAULT_LIMITS,
    source,
    control,
    alerts,
    deadLetters: dead,
    metrics,
    onRuleError: (ruleId, version, seq, message) =>
      ruleErrors.push(`${ruleId}@${version} under ${seq}: ${message}`),
    onApplied: (p, seq, ms) => {
      applied.push([p, seq]);
      activation.push(ms);
    },
    admit: () => {
      admitted++;
      return admit();
    },
    ...(s.downstream === undefined ? {} : { downstream: { space: s.downstream } }),
  });
  running.push(runner);
  return {
    stream,
    control,
    source,
    alerts,
    dead,
    metrics,
    applied,
    activation,
    ruleErrors,
    admitted: () => admitted,
    runner,
    setAdmit: (f: () => Promise<void> | undefined) => (admit = f),
    /** The alerts handed over so far: rule and the id of their first event. */
    fired: () => alerts.published.map((a) => `${a.ruleId}:${a.events[0]?.id ?? a.events[0]?.seq}`),
  };
}

/** vigil_events_total of partition P, by outcome. */
export async function outcomes(metrics: WorkerMetrics): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await metrics.events.get()).values)
    if (v.labels.partition === String(P)) out[String(v.labels.outcome)] = v.value;
  return out;
}
