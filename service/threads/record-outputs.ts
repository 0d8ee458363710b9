import {
  lateMessage,
  type HopMessage,
  type ProcessResult,
  type RuleSet,
} from '../../rules/index.js';
import { hopPayload, rekeySubject, Streams } from '../../protocol/index.js';
import type { LogRecord } from '../ingest/event-source.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { HopSender } from '../output/hop-sender.js';
import type { AlertSink, DeadLetterSink } from '../output/sinks.js';

const encoder = new TextEncoder();

/** What a partition's outputs go through, and how they name it. */
export interface RecordOutputsOptions {
  readonly partition: number;
  /** The `partition` label of its metrics (see `partitionLabel`). */
  readonly label: string;
  /** The stream it reads, named in its dead letters. */
  readonly stream: string;
  readonly alerts: AlertSink;
  readonly deadLetters: DeadLetterSink;
  readonly metrics: WorkerMetrics;
  /** A rule failed on an event (the runner counts nothing itself; the worker decides on quarantine). */
  readonly onRuleError: (
    ruleId: string,
    ruleVersion: number,
    controlSeq: number,
    message: string,
  ) => void;
  /** The rule set in force now (names a failing rule's version). */
  readonly ruleSet: () => RuleSet;
  /** With the re-keying hop on, a partition of the event log: where what it sends goes out. */
  readonly hop?: { readonly sender: HopSender };
}

/**
 * What leaves a partition for each record it handles: counts for the metrics, alerts and dead
 * letters to their sinks in order, and what it sends over the re-keying hop. Nothing to publish
 * (the usual case) costs no promise.
 */
export class RecordOutputs {
  /**
   * Matches per rule since the last flush: an event of a busy type matches dozens of rules. A
   * count is a box, so a match is one lookup, not a lookup and a store; a box left at 0 by a
   * whole flush interval is dropped, so rules long gone do not stay.
   */
  private readonly matches = new Map<string, { n: number }>();

  constructor(private readonly o: RecordOutputsOptions) {}

  /** Adds the matches counted since the last call to the per-rule counter (by the runner's timer). */
  flushMatches(): void {
    const counter = this.o.metrics.ruleMatches;
    this.matches.forEach((c, rule, map) => {
      if (c.n === 0) map.delete(rule);
      else {
        counter.inc({ rule }, c.n);
        c.n = 0;
      }
    });
  }

  /** Sends record `r` to the dead letters with its reason, and counts it under that outcome. */
  dead(r: LogRecord, reason: string, message: string, ruleId?: string): Promise<void> | undefined {
    this.o.metrics.events.inc({ partition: this.o.label, outcome: reason });
    return this.o.deadLetters.publish({
      reason,
      data: r.data,
      message,
      source: { stream: this.o.stream, subject: r.subject, seq: r.seq },
      ...(ruleId === undefined ? {} : { ruleId }),
      id: `dlq-${r.seq}-${reason}${ruleId === undefined ? '' : `-${ruleId}`}`,
    });
  }

  /** Hands what a source sends downstream to the hop sender, in order. */
  sendHop(sent: readonly HopMessage[]): Promise<void> | undefined {
    const hop = this.o.hop;
    if (hop === undefined) return undefined;
    let wait: Promise<void> | undefined;
    for (let i = 0; i < sent.length; i++) {
      const m = sent[i] as HopMessage;
      wait =
        hop.sender.send(rekeySubject(m.space, m.partition), hopPayload(this.o.partition, m)) ??
        wait;
    }
    if (sent.length > 0) this.o.metrics.hopSent.inc({ partition: this.o.label }, sent.length);
    return wait;
  }

  /** Counts what a record produced, and publishes it; nothing to publish (the usual case): no promise. */
  emit(r: LogRecord, out: ProcessResult): Promise<void> | undefined {
    const sending = out.sent.length === 0 ? undefined : this.sendHop(out.sent);
    const published = this.report(r, out);
    if (sending === undefined) return published;
    return published === undefined ? sending : Promise.all([sending, published]).then(() => {});
  }

  private report(r: LogRecord, out: ProcessResult): Promise<void> | undefined {
    const metrics = this.o.metrics;
    // Indexed loops: an empty list is the rules core's one frozen array, and `for…of` over a
    // frozen array allocates an iterator and its results, per record, a visible share of what a
    // worker allocated under load (sampling heap profiler).
    const { matched, overflows, keyMissing } = out;
    for (let i = 0; i < keyMissing.length; i++)
      metrics.ruleKeyMissing.inc({ rule: keyMissing[i] as string });
    for (let i = 0; i < matched.length; i++) {
      const id = matched[i] as string;
      const c = this.matches.get(id);
      if (c === undefined) this.matches.set(id, { n: 1 });
      else c.n++;
    }
    for (let i = 0; i < overflows.length; i++) {
      const o = overflows[i] as ProcessResult['overflows'][number];
      metrics.overflows.inc({ rule: o.ruleId, limit: o.limit }, o.dropped);
    }
    if (out.suppressed > 0) metrics.suppressed.inc(out.suppressed);
    if (
      out.alerts.length === 0 &&
      out.late.length === 0 &&
      out.invalid.length === 0 &&
      out.errors.length === 0
    )
      return undefined;
    return this.publish(r, out);
  }

  /**
   * Hands a record's outputs to the sinks in order, without a promise while they take them at once
   * (the usual case); when one asks to wait (backpressure), the rest follow once it has room.
   */
  private publish(r: LogRecord, out: ProcessResult): Promise<void> | undefined {
    const metrics = this.o.metrics;
    const steps: (() => Promise<void> | undefined)[] = [];
    for (const a of out.alerts)
      steps.push(() => {
        metrics.alerts.inc({ rule: a.ruleId });
        return this.o.alerts.publish(a);
      });
    for (const l of out.late)
      steps.push(() => this.dead(r, 'late', lateMessage(l.ts, l.watermark)));
    for (const i of out.invalid) steps.push(() => this.dead(r, i.reason, i.message));
    for (const e of out.errors)
      steps.push(() => {
        metrics.ruleErrors.inc({ rule: e.ruleId });
        const rule = this.o.ruleSet().rules.get(e.ruleId);
        this.o.onRuleError(
          e.ruleId,
          rule?.version ?? 0,
          this.o.ruleSet().controlSeq,
          e.error.message,
        );
        // The event may have waited in the reorder buffer: it is not always the record just read.
        const data = r.seq === e.seq ? r.data : encoder.encode(JSON.stringify(e.event));
        return this.o.deadLetters.publish({
          reason: 'rule-error',
          data,
          message: e.error.message,
          source: {
            stream: Streams.events,
            subject: r.seq === e.seq ? r.subject : `events.*.${this.o.label}`,
            seq: e.seq,
          },
          ruleId: e.ruleId,
          id: `dlq-${e.seq}-rule-error-${e.ruleId}`,
        });
      });
    return inOrder(steps, 0);
  }
}

/** Runs `steps` from `i` on, waiting for each that returns a promise before the next. */
function inOrder(
  steps: readonly (() => Promise<void> | undefined)[],
  i: number,
): Promise<void> | undefined {
  for (; i < steps.length; i++) {
    const wait = (steps[i] as () => Promise<void> | undefined)();
    if (wait !== undefined) {
      const next = i + 1;
      return wait.then(() => inOrder(steps, next));
    }
  }
  return undefined;
}
