import { randomUUID } from 'node:crypto';
import { DeliverPolicy, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { emptyRuleSet, type Alert, type RuleLimits, type RuleSet } from '../rules/index.js';
import { storedAtMs } from '../protocol/index.js';
import { foldVersions, MARKER_KEY, Streams } from '../protocol/index.js';
import { Replay, type ReplayMessage, type ReplayRekey } from './replay.js';

/** Which part of `EVENTS` to replay: by sequence or by store time (inclusive bounds). */
export interface BacktestRange {
  readonly fromSeq?: number;
  readonly toSeq?: number;
  /** ms since the epoch. */
  readonly fromTime?: number;
  readonly toTime?: number;
}

export interface BacktestRequest {
  readonly range: BacktestRange;
  /** A rule set to compare with the rules that were in force; without it only those run. */
  readonly candidate?: RuleSet;
  /** Most records read; the run stops there and says so. */
  readonly maxRecords: number;
  /** Most alerts listed per side (all are counted). */
  readonly maxAlerts: number;
}

export interface BacktestProgress {
  readonly read: number;
  /** Records in the range when the run started (an upper estimate when bounded by time). */
  readonly total: number;
  readonly lastSeq: number;
}

interface Side {
  readonly alerts: number;
  readonly perRule: Record<string, number>;
  readonly list: Alert[];
}

/** What a back-test found: alerts of the rules in force ("current") and of the candidate, and how they differ. */
export interface BacktestResult {
  readonly range: { readonly fromSeq: number; readonly toSeq: number; readonly records: number };
  readonly truncated: boolean;
  readonly current: Side;
  readonly candidate?: Side;
  /** Alerts only one side produced, matched by rule, key and the events that caused them. */
  readonly diff?: {
    readonly perRule: {
      readonly ruleId: string;
      readonly current: number;
      readonly candidate: number;
    }[];
    readonly onlyCurrent: Alert[];
    readonly onlyCandidate: Alert[];
    /** True when a side had more than {@link MAX_DIFF_ALERTS} alerts: the lists compare the first ones. */
    readonly partial: boolean;
  };
}

/** Alerts kept per side for the alert-by-alert difference (counts per rule are always complete). */
export const MAX_DIFF_ALERTS = 200_000;

/** The same alert from two rule versions: rule, key, and the log positions that caused it. */
const signature = (a: Alert): string =>
  `${a.ruleId}|${a.key}|${a.ts}|${a.events.map((e) => e.seq).join(',')}`;

function side(): { alerts: number; perRule: Record<string, number>; list: Alert[]; all: Alert[] } {
  return { alerts: 0, perRule: {}, list: [], all: [] };
}

async function readAll(
  js: JetStreamClient,
  stream: string,
): Promise<{ seq: number; data: Uint8Array }[]> {
  const out: { seq: number; data: Uint8Array }[] = [];
  const consumer = await js.consumers.get(stream, { deliver_policy: DeliverPolicy.All });
  const messages = await consumer.consume();
  for await (const m of messages) {
    out.push({ seq: m.seq, data: m.data });
    if (m.info.pending === 0) break;
  }
  await messages.close();
  return out;
}

/**
 * Replays a range of `EVENTS` in this process through the rules that were in force at each
 * event (the markers in the log), and through a candidate rule set if given; nothing is
 * published. Keyed state starts empty at the range's start, so a range from the beginning gives
 * exactly the alerts the service produced.
 */
export async function runBacktest(
  js: JetStreamClient,
  jsm: JetStreamManager,
  cfg: {
    readonly partitions: number;
    readonly outOfOrderMs: number;
    readonly limits: RuleLimits;
    /** The service's re-keying hop, when on: the replay runs it too. */
    readonly rekey?: ReplayRekey | undefined;
  },
  req: BacktestRequest,
  onProgress: (p: BacktestProgress) => void,
  signal: AbortSignal,
): Promise<BacktestResult> {
  const info = await jsm.streams.info(Streams.events);
  const head = info.state.last_seq;
  const versions = foldVersions(
    (await jsm.streams.info(Streams.control)).state.messages > 0
      ? await readAll(js, Streams.control)
      : [],
    cfg.limits,
  );
  const toSeq = Math.min(req.range.toSeq ?? head, head);
  let fromSeq = Math.max(1, req.range.fromSeq ?? info.state.first_seq);
  const empty = {
    range: { fromSeq, toSeq, records: 0 },
    truncated: false,
    current: { alerts: 0, perRule: {}, list: [] },
  };
  if (head === 0 || fromSeq > toSeq) return empty;
  // A start time after the last record would leave the consumer waiting for records yet to come.
  if (req.range.fromTime !== undefined && req.range.fromSeq === undefined) {
    const last = await jsm.streams.getMessage(Streams.events, { seq: head }).catch(() => null);
    if (last !== null && last.time.getTime() < req.range.fromTime) return empty;
  }

  const consumerOpts =
    req.range.fromTime !== undefined && req.range.fromSeq === undefined
      ? {
          deliver_policy: DeliverPolicy.StartTime,
          opt_start_time: new Date(req.range.fromTime).toISOString(),
        }
      : { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: fromSeq };
  // The rule set in force in each partition at the start: its last marker before the range.
  const initial = new Map<number, RuleSet>();
  const markerFilter = `events.${MARKER_KEY}.*`;
  // One subject per partition that has markers (`events._vigil.<p>`): each is read on its own,
  // since a consumer's filter must fall within one of the stream's subjects (`events.*.<p>`).
  const markerSubjects = Object.keys(
    (await jsm.streams.info(Streams.events, { subjects_filter: markerFilter })).state.subjects ??
      {},
  );
  let current: Replay | undefined;
  let candidate: Replay | undefined;
  const startMessages = await js.consumers.get(Streams.events, consumerOpts);
  const events = await startMessages.consume({ max_messages: 1000 });
  const cur = side();
  const cand = side();
  let read = 0;
  let truncated = false;
  let lastSeq = fromSeq - 1;
  try {
    let first = true;
    for await (const m of events) {
      if (signal.aborted) throw new Error('cancelled');
      const storedAt = storedAtMs(m.info);
      if (first) {
        first = false;
        fromSeq = m.seq;
        if (fromSeq > 1)
          for (const subject of markerSubjects) {
            const markers = await js.consumers.get(Streams.events, {
              filter_subjects: subject,
              deliver_policy: DeliverPolicy.All,
            });
            const it = await markers.consume();
            for await (const mk of it) {
              if (mk.seq >= fromSeq) break;
              const p = Number(mk.subject.split('.')[2]);
              const c = (mk.json<{ controlSeq?: unknown }>() ?? {}).controlSeq;
              const rs = typeof c === 'number' ? versions.get(c) : undefined;
              if (rs !== undefined && rs.controlSeq > (initial.get(p)?.controlSeq ?? 0))
                initial.set(p, rs);
              if (mk.info.pending === 0) break;
            }
            await it.close();
          }
        current = new Replay(
          { kind: 'history', versions },
          cfg.partitions,
          cfg.outOfOrderMs,
          cfg.limits,
          (p) => initial.get(p) ?? emptyRuleSet(),
          cfg.rekey,
        );
        if (req.candidate !== undefined)
          candidate = new Replay(
            { kind: 'candidate', ruleSet: req.candidate },
            cfg.partitions,
            cfg.outOfOrderMs,
            cfg.limits,
            undefined,
            cfg.rekey,
          );
      }
      if (m.seq > toSeq || (req.range.toTime !== undefined && storedAt > req.range.toTime)) break;
      const msg: ReplayMessage = { seq: m.seq, subject: m.subject, data: m.data, storedAt };
      for (const [s, r] of [
        [cur, current],
        [cand, candidate],
      ] as const) {
        if (r === undefined) continue;
        for (const a of r.feed(msg)) {
          s.alerts++;
          s.perRule[a.ruleId] = (s.perRule[a.ruleId] ?? 0) + 1;
          if (s.list.length < req.maxAlerts) s.list.push(a);
          if (req.candidate !== undefined && s.all.length < MAX_DIFF_ALERTS) s.all.push(a);
        }
      }
      lastSeq = m.seq;
      read++;
      if (read % 500 === 0) {
        onProgress({ read, total: toSeq - fromSeq + 1, lastSeq });
        // The API shares the service's main thread: let HTTP (and /metrics) in between.
        await new Promise((r) => setImmediate(r));
      }
      if (read >= req.maxRecords) {
        truncated = lastSeq < toSeq;
        break;
      }
      if (m.seq >= toSeq || m.info.pending === 0) break;
    }
  } finally {
    await events.close();
  }
  onProgress({ read, total: Math.max(read, toSeq - fromSeq + 1), lastSeq });
  const pick = (s: ReturnType<typeof side>): Side => ({
    alerts: s.alerts,
    perRule: s.perRule,
    list: s.list,
  });
  const result: BacktestResult = {
    range: { fromSeq, toSeq: lastSeq, records: read },
    truncated,
    current: pick(cur),
  };
  if (req.candidate === undefined) return result;
  const a = new Set(cur.all.map(signature));
  const b = new Set(cand.all.map(signature));
  const rules = [...new Set([...Object.keys(cur.perRule), ...Object.keys(cand.perRule)])].sort();
  return {
    ...result,
    candidate: pick(cand),
    diff: {
      perRule: rules.map((ruleId) => ({
        ruleId,
        current: cur.perRule[ruleId] ?? 0,
        candidate: cand.perRule[ruleId] ?? 0,
      })),
      onlyCurrent: cur.all.filter((x) => !b.has(signature(x))).slice(0, req.maxAlerts),
      onlyCandidate: cand.all.filter((x) => !a.has(signature(x))).slice(0, req.maxAlerts),
      partial: cur.alerts > cur.all.length || cand.alerts > cand.all.length,
    },
  };
}

/** A back-test running in the background: progress while it runs, its result when done. */
export interface BacktestJob {
  readonly id: string;
  status: 'running' | 'done' | 'failed' | 'cancelled';
  progress: BacktestProgress;
  result?: BacktestResult;
  error?: string;
  readonly startedAt: number;
  finishedAt?: number;
  readonly abort: AbortController;
  readonly done: Promise<void>;
}

/** Keeps the last few back-tests; one runs at a time per process, as each uses a core. */
export class BacktestJobs {
  private readonly jobs = new Map<string, BacktestJob>();

  constructor(private readonly keep = 20) {}

  get running(): boolean {
    return [...this.jobs.values()].some((j) => j.status === 'running');
  }

  start(
    run: (
      onProgress: (p: BacktestProgress) => void,
      signal: AbortSignal,
    ) => Promise<BacktestResult>,
  ): BacktestJob {
    const abort = new AbortController();
    const job: BacktestJob = {
      id: randomUUID(),
      status: 'running',
      progress: { read: 0, total: 0, lastSeq: 0 },
      startedAt: Date.now(),
      abort,
      done: Promise.resolve(),
    };
    (job as { done: Promise<void> }).done = run((p) => (job.progress = p), abort.signal)
      .then(
        (r) => {
          job.result = r;
          job.status = 'done';
        },
        (e: unknown) => {
          job.status = abort.signal.aborted ? 'cancelled' : 'failed';
          job.error = e instanceof Error ? e.message : String(e);
        },
      )
      .finally(() => {
        job.finishedAt = Date.now();
      });
    this.jobs.set(job.id, job);
    for (const old of [...this.jobs.keys()].slice(0, Math.max(0, this.jobs.size - this.keep))) {
      if (this.jobs.get(old)?.status !== 'running') this.jobs.delete(old);
    }
    return job;
  }

  get(id: string): BacktestJob | undefined {
    return this.jobs.get(id);
  }

  cancelAll(): void {
    for (const j of this.jobs.values()) j.abort.abort();
  }
}
