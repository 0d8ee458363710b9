import {
  checkpointParts,
  createDownstream,
  createPartition,
  emptyRuleSet,
  processRecord,
  restorePartitionParts,
  type PartitionRecord,
  type PartitionState,
  type ProcessResult,
  type RuleSet,
} from '../../rules/index.js';
import { downstreamRecord, partitionOf } from '../../protocol/index.js';
import { memoryStore, writeParts } from './harness.js';

/** A record a source sends downstream, before the downstream log gives it a position. */
export type HopRecord = DistributiveOmit<
  Extract<PartitionRecord, { kind: 'forward' | 'report' }>,
  'seq'
>;
type DistributiveOmit<T, K extends keyof T> = T extends unknown ? Omit<T, K> : never;

/** What the sources sent: per key space, per downstream partition, per source, in source order. */
export type HopQueues = Map<string, HopRecord[][][]>;

export interface SourceRun {
  readonly queues: HopQueues;
  readonly sources: PartitionState[];
  readonly results: ProcessResult[][];
}

/**
 * Runs source partitions over their logs as the live path would, and collects what each sends
 * downstream, per key space, per downstream partition, per source, in order.
 */
export function runSources(
  logs: readonly PartitionRecord[][],
  opts: {
    readonly first: RuleSet;
    readonly sets: ReadonlyMap<number, RuleSet>;
    readonly downstreams: number;
    readonly partitionKey: readonly string[];
    readonly reportEveryMs?: number;
    readonly outOfOrderMs?: number;
    /** Checkpoints every `every` records and, at record `at`, restores from the last one and goes on from there. */
    readonly crash?: Crash;
  },
): SourceRun {
  const queues: HopQueues = new Map();
  const queue = (space: string, d: number, src: number): HopRecord[] => {
    let q = queues.get(space);
    if (q === undefined)
      queues.set(
        space,
        (q = Array.from({ length: opts.downstreams }, () => logs.map((): HopRecord[] => []))),
      );
    return q[d]?.[src] as HopRecord[];
  };
  const options = {
    outOfOrderMs: opts.outOfOrderMs ?? 0,
    rekey: {
      partitionKey: opts.partitionKey,
      partitions: opts.downstreams,
      partitionOf,
      reportEveryMs: opts.reportEveryMs,
    },
  };
  const at = (c: number): RuleSet | undefined =>
    c === opts.first.controlSeq ? opts.first : opts.sets.get(c);
  const sources: PartitionState[] = [];
  const results: ProcessResult[][] = [];
  logs.forEach((log, src) => {
    let st = createPartition(opts.first, { partition: src, ...options });
    const outs: ProcessResult[] = [];
    results.push(outs);
    const store = memoryStore();
    let crashed = false;
    for (let i = 0; i < log.length; i++) {
      if (opts.crash !== undefined && !crashed && i === opts.crash.at) {
        crashed = true;
        if (store.meta !== '') {
          st = restorePartitionParts(store, at, options);
          const offset = st.offset;
          i = log.findIndex((r) => r.seq > offset);
          if (i < 0) break;
        } else {
          st = createPartition(opts.first, { partition: src, ...options });
          i = 0;
        }
      }
      const out = processRecord(st, log[i] as PartitionRecord);
      outs.push(out);
      for (const m of out.sent) {
        const ruleSet = at(m.controlSeq);
        if (ruleSet === undefined) throw new Error(`no rule set ${m.controlSeq}`);
        queue(m.space, m.partition, src).push(
          // Its position is given when its partition reads it.
          downstreamRecord(src, m, 0, ruleSet),
        );
      }
      if (opts.crash !== undefined && (i + 1) % opts.crash.every === 0)
        writeParts(store, checkpointParts(st));
    }
    sources.push(st);
  });
  return { queues, sources, results };
}

/** A restart: checkpoints every `every` records; at record `at`, a restore from the last one. */
export interface Crash {
  readonly every: number;
  readonly at: number;
}

/**
 * Feeds one downstream partition its sources' records, interleaved by `picks` (each the source
 * whose next record comes; an exhausted source passes to the next), then the rest in source
 * order. Each source's own order is kept, as one stream keeps it. The results, in order.
 */
export function runDownstream(
  space: string,
  partition: number,
  perSource: readonly HopRecord[][],
  picks: readonly number[] = [],
  crash?: Crash,
  ruleSetAt: (controlSeq: number) => RuleSet | undefined = () => undefined,
): { results: ProcessResult[]; state: PartitionState } {
  const options = { partition, space, sources: perSource.length };
  let st = createDownstream(emptyRuleSet(), options);
  const next = perSource.map(() => 0);
  const results: ProcessResult[] = [];
  // The partition's log as it arrives: a restore reads it again after the checkpoint's offset.
  const log: PartitionRecord[] = [];
  const store = memoryStore();
  const empty = emptyRuleSet();
  const at = (c: number): RuleSet | undefined => (c === 0 ? empty : ruleSetAt(c));
  const feed = (rec: PartitionRecord): void => {
    results.push(processRecord(st, rec));
    if (crash !== undefined && rec.seq % crash.every === 0) writeParts(store, checkpointParts(st));
    if (crash !== undefined && rec.seq === crash.at) {
      st =
        store.meta === '' ? createDownstream(empty, options) : restorePartitionParts(store, at, {});
      for (const again of log) if (again.seq > st.offset) results.push(processRecord(st, again));
    }
  };
  const take = (src: number): void => {
    const rec = perSource[src]?.[next[src] as number];
    if (rec === undefined) return;
    next[src] = (next[src] as number) + 1;
    const r = { ...rec, seq: log.length + 1 } as PartitionRecord;
    log.push(r);
    feed(r);
  };
  const left = (src: number): boolean => (next[src] as number) < (perSource[src]?.length ?? 0);
  for (const p of picks) {
    let src = p % perSource.length;
    for (let i = 0; i < perSource.length && !left(src); i++) src = (src + 1) % perSource.length;
    take(src);
  }
  for (let src = 0; src < perSource.length; src++) while (left(src)) take(src);
  return { results, state: st };
}

/**
 * A source's records as a restart would send them: after record `to`, the records from `from`
 * on once more (a source restored from an earlier checkpoint forwards and reports again).
 */
export function withReplay(list: readonly HopRecord[], from: number, to: number): HopRecord[] {
  const a = Math.min(from, to, list.length);
  const b = Math.min(Math.max(from, to), list.length);
  return [...list.slice(0, b), ...list.slice(a, b), ...list.slice(b)];
}

/**
 * A source's records as a failed publish leaves them: record `at` lost, those after it up to `to`
 * taken in their turn or not, then sent again from `at` on, in order (the source goes back to the
 * failed one).
 */
export function withGap(list: readonly HopRecord[], at: number, to: number): HopRecord[] {
  const a = Math.min(at, to, list.length);
  const b = Math.min(Math.max(at, to), list.length);
  if (a >= b) return [...list];
  return [...list.slice(0, a), ...list.slice(a + 1, b), ...list.slice(a, b), ...list.slice(b)];
}
