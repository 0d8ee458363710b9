import {
  createDownstream,
  createPartition,
  emptyRuleSet,
  processRecord,
  type PartitionState,
  type RekeyOptions,
  type RuleLimits,
  type RuleSet,
} from '../../rules/index.js';
import type { ControlFollower } from '../../jetstream/index.js';
import type { EventSource, LogRecord } from '../ingest/event-source.js';
import {
  classifyHop,
  classifyRecord,
  downstreamRecord,
  type HopClass,
  Streams,
} from '../../protocol/index.js';
import type { HopSender } from '../output/hop-sender.js';
import { RecordOutputs, type RecordOutputsOptions } from './record-outputs.js';
import { PartitionGauges } from './partition-gauges.js';

export interface PartitionRunnerDeps extends Pick<
  RecordOutputsOptions,
  'partition' | 'alerts' | 'deadLetters' | 'metrics' | 'onRuleError'
> {
  readonly partitions: number;
  readonly outOfOrderMs: number;
  readonly limits: RuleLimits;
  readonly source: EventSource;
  readonly control: ControlFollower;
  /** The partition applied a marker. */
  readonly onApplied: (
    partition: number,
    controlSeq: number,
    /** Stored in CONTROL → applied here, when the commit time is known. */
    activationMs: number | undefined,
  ) => void;
  /** State restored from a checkpoint; a new partition otherwise. */
  readonly initialState?: PartitionState;
  /**
   * With the re-keying hop on, a partition of the event log: the events of re-keyed rules and its
   * reports go out through `sender` (see `rules/source-hop.ts`).
   */
  readonly hop?: { readonly sender: HopSender; readonly rekey: RekeyOptions };
  /** A downstream partition of the hop: key space `space`'s partition `partition`, read from `REKEY`. */
  readonly downstream?: { readonly space: string };
  /** Called before each record; may hold the partition back (checkpoint backpressure). */
  readonly admit?: () => Promise<void> | undefined;
}

/**
 * Runs one partition: reads its log, feeds every record to the rules core, and sends alerts and
 * dead letters on. An epoch marker is a barrier: the partition waits until this worker has read
 * the control message the marker names, then applies it exactly there (G2).
 */
export class PartitionRunner {
  readonly state: PartitionState;
  private lastActivity = Date.now();
  private done: Promise<void> | undefined;
  /** The `partition` label of its metrics: `<p>`, or `<p>~<space>` downstream of the hop. */
  private readonly p: string;
  /** The stream it reads. */
  private readonly stream: string;
  /** Where what each record produced goes. */
  private readonly outputs: RecordOutputs;

  /** Its gauges and counters, written every 64 records and by a timer. */
  private readonly gauges: PartitionGauges;

  constructor(private readonly d: PartitionRunnerDeps) {
    this.state =
      d.initialState ??
      (d.downstream === undefined
        ? createPartition(emptyRuleSet(), {
            partition: d.partition,
            outOfOrderMs: d.outOfOrderMs,
            limits: d.limits,
            ...(d.hop === undefined ? {} : { rekey: d.hop.rekey }),
          })
        : createDownstream(emptyRuleSet(), {
            partition: d.partition,
            space: d.downstream.space,
            sources: d.partitions,
            limits: d.limits,
          }));
    this.handled = this.state.offset;
    this.newestEventTs = this.state.maxTs;
    this.p = partitionLabel(d.partition, d.downstream?.space);
    this.stream = d.downstream === undefined ? Streams.events : Streams.rekey;
    this.outputs = new RecordOutputs({
      partition: d.partition,
      label: this.p,
      stream: this.stream,
      alerts: d.alerts,
      deadLetters: d.deadLetters,
      metrics: d.metrics,
      onRuleError: d.onRuleError,
      ruleSet: () => this.state.ruleSet,
      ...(d.hop === undefined ? {} : { hop: { sender: d.hop.sender } }),
    });
    this.gauges = new PartitionGauges(d.metrics, this.p);
    // A restored partition may have nothing new to read: show where it stands from the start.
    this.gauges.offset.set(this.state.offset);
    // A key space's partition judges each event under the rule set it was read under: what it
    // has in force (when dropped lineages end) is not a rule version of its own to show.
    if (d.downstream === undefined)
      d.metrics.controlApplied.set({ partition: this.p }, this.state.ruleSet.controlSeq);
  }

  start(): void {
    const flusher = setInterval(() => {
      this.flushMetrics();
      this.outputs.flushMatches();
      this.gauges.flushState(this.state);
    }, 200);
    flusher.unref();
    this.done = this.run().finally(() => {
      clearInterval(flusher);
      this.flushMetrics();
      this.outputs.flushMatches();
      this.gauges.flushState(this.state);
    });
  }

  /** Milliseconds since the partition last read a record. */
  get idleMs(): number {
    return Date.now() - this.lastActivity;
  }

  /**
   * True when the partition has handled every record of its log (asked of the server): idle, not
   * behind. A tick is written only then, so event time never moves past records already stored.
   */
  async caughtUp(): Promise<boolean> {
    if (this.busy) return false;
    return this.d.source.caughtUp(this.handled);
  }

  /**
   * The time a tick written now should carry: the newest event's time (as the partition counted
   * it, no later than its store time) plus the time this thread's clock has run since it read
   * that event. Event time so goes on at the pace of the wall clock from where the events left
   * it: a producer whose events reach the log 1.5 s after their `ts` keeps that lag in the ticks,
   * so its next in-order event is not late; and no clock is compared with another's (a worker's
   * clock ahead of the server's moves nothing). A restored partition counts from its restored
   * time and the moment it was restored.
   */
  tickTime(now: number): number {
    return Number.isFinite(this.newestEventTs)
      ? this.newestEventTs + (now - this.newestReadAt)
      : now;
  }

  /**
   * Whether a tick written now would release something: a buffered event, a due timer or a key
   * due to expire lies at or before the watermark such a tick gives. An idle partition whose
   * windows end in an hour gets no tick until then.
   */
  wantsTick(now: number): boolean {
    const st = this.state;
    let due = Infinity;
    const b = st.buffer.peek();
    if (b !== undefined) due = b.ts;
    const t = st.timers.peek();
    if (t !== undefined && t.time < due) due = t.time;
    const e = st.expiry.peek();
    if (e !== undefined && e < due) due = e;
    const watermark = this.tickTime(now) - st.outOfOrderMs - 1;
    // With the hop on, the downstream partitions wait for this one's watermark too.
    const hop = st.hop;
    if (hop !== undefined && hop.sent.size > 0 && watermark >= hop.lastReport + hop.reportEveryMs)
      return true;
    return due !== Infinity && watermark >= due;
  }

  async stop(): Promise<void> {
    await this.d.source.stop();
    await this.done;
  }

  /**
   * Runs `fn` between two records: now when the partition is idle, else right after the record
   * being handled has handed all its alerts and dead letters to the publisher. A checkpoint taken
   * there covers no record whose outputs are still unpublished.
   */
  atBoundary(fn: () => void): void {
    if (this.busy) this.boundary.push(fn);
    else fn();
  }

  private busy = false;
  /** The event time the partition's newest event set, and when this thread read it (see {@link tickTime}). */
  private newestEventTs: number;
  private newestReadAt = Date.now();
  /** The sequence of the last record handled (a dead letter or a probe leaves the state's offset where it was). */
  private handled: number;
  private sinceYield = 0;
  private readonly boundary: (() => void)[] = [];

  private async run(): Promise<void> {
    const source = this.d.source;
    for (;;) {
      const r = source.next();
      if (r === undefined) {
        if (source.ended) return;
        await source.wait();
        continue;
      }
      const admitted = this.d.admit?.();
      if (admitted !== undefined) await admitted;
      this.lastActivity = Date.now();
      this.busy = true;
      try {
        // Most records publish nothing: they are handled without a promise.
        const handled = this.handle(r);
        if (handled !== undefined) await handled;
      } finally {
        this.handled = r.seq;
        this.busy = false;
        if (this.boundary.length > 0) for (const fn of this.boundary.splice(0)) fn();
      }
      // Label lookups cost more than the update: the per-record gauges and counter are written
      // every 64 records and by a timer, the per-rule match counts (dozens of labels) by the timer.
      this.last = r;
      const yieldNow = ++this.sinceYield >= 64;
      if (yieldNow) this.flushMetrics();
      // Records waiting in the source are taken without a turn of the event loop: yield now and
      // then, or the worker's acks, control messages, checkpoints and metrics would wait for a
      // whole drain.
      if (yieldNow) {
        this.sinceYield = 0;
        await new Promise((r) => setImmediate(r));
      }
    }
  }

  private judgedSinceFlush = 0;
  private last: LogRecord | undefined;
  private flushed: LogRecord | undefined;

  private flushMetrics(): void {
    const r = this.last;
    if (r === undefined || r === this.flushed) return;
    this.flushed = r;
    this.gauges.flushRecord(r, this.state.watermark, this.judgedSinceFlush);
    this.judgedSinceFlush = 0;
  }

  private handle(r: LogRecord): Promise<void> | undefined {
    if (this.d.downstream !== undefined) return this.hopRecord(r);
    const c = classifyRecord(r.subject, r.data, this.d.partition, this.d.partitions);
    switch (c.kind) {
      case 'marker':
        return this.marker(r, c.controlSeq);
      case 'tick': {
        const out = processRecord(this.state, {
          kind: 'tick',
          seq: r.seq,
          ts: c.ts,
          storedAt: r.storedAt,
        });
        if (out.invalid.length === 0)
          this.d.metrics.events.inc({ partition: this.p, outcome: 'tick' });
        return this.outputs.emit(r, out);
      }
      case 'probe':
        this.d.metrics.events.inc({ partition: this.p, outcome: 'probe' });
        return undefined;
      case 'dead':
        return this.outputs.dead(r, c.reason, c.message);
      case 'event':
        break;
    }
    const newest = this.state.maxTs;
    const result = processRecord(this.state, {
      kind: 'event',
      seq: r.seq,
      key: c.key,
      data: r.data,
      publishTs: r.storedAt,
    });
    if (this.state.maxTs !== newest) {
      this.newestEventTs = this.state.maxTs;
      this.newestReadAt = Date.now();
    }
    this.d.metrics.processing.observe(Math.max(0, Date.now() - r.storedAt) / 1000);
    if (result.invalid.length === 0 && result.late.length === 0) this.judgedSinceFlush++;
    return this.outputs.emit(r, result);
  }

  private async marker(r: LogRecord, c: number): Promise<void> {
    if (c <= this.state.ruleSet.controlSeq) {
      this.d.metrics.events.inc({ partition: this.p, outcome: 'marker-duplicate' });
      return;
    }
    const control = this.d.control;
    // A marker may only name a message CONTROL holds: otherwise it is forged, and waiting for it would stall the partition.
    if (c > control.seq && c > (await control.streamHead())) {
      return this.outputs.dead(
        r,
        'forged-marker',
        `marker names control sequence ${c}, which CONTROL does not hold; markers are written by Vigil only`,
      );
    }
    await control.waitFor(c);
    const ruleSet = control.ruleSetAt(c);
    if (ruleSet === undefined)
      return this.outputs.dead(
        r,
        'bad-marker',
        `the rule set at control sequence ${c} is no longer held by this worker`,
      );
    const out = processRecord(this.state, { kind: 'marker', seq: r.seq, ruleSet });
    this.d.metrics.events.inc({ partition: this.p, outcome: 'marker' });
    this.d.metrics.controlApplied.set({ partition: this.p }, c);
    const committed = control.commitTime(c);
    const activationMs = committed === undefined ? undefined : Math.max(0, Date.now() - committed);
    if (activationMs !== undefined) this.d.metrics.activation.observe(activationMs / 1000);
    this.d.onApplied(this.d.partition, c, activationMs);
    // A source reports the change to the key spaces' partitions.
    if (out.sent.length > 0) await this.outputs.sendHop(out.sent);
  }

  /**
   * Downstream of the hop: a message from a source partition, judged under the rule set it names
   * (a barrier, as a marker is: this worker's CONTROL follower must have applied it). A message
   * that is not its source's turn is handed on without one: the rules core drops it.
   */
  private hopRecord(r: LogRecord): Promise<void> | undefined {
    const c = classifyHop(r.data);
    if (c.kind === 'dead') return this.outputs.dead(r, c.reason, c.message);
    const d = this.state.down;
    // Its turn: judged under the rule set it names. Usually at hand: no promise then.
    if (d !== undefined && d.isSource(c.src) && d.turn(c.src, c.origin, c.n) === 'turn') {
      const cs = c.controlSeq;
      if (cs > this.d.control.seq) return this.hopAfterControl(r, c, cs);
      return this.hopJudged(r, c, cs);
    }
    // Not its turn (or no source): the rules core drops it without a rule set.
    return this.hopJudged(r, c, undefined);
  }

  /** A message naming a control sequence this worker has not applied yet: a barrier, as a marker is. */
  private async hopAfterControl(
    r: LogRecord,
    c: Exclude<HopClass, { kind: 'dead' }>,
    cs: number,
  ): Promise<void> {
    const control = this.d.control;
    if (cs > (await control.streamHead()))
      return this.outputs.dead(
        r,
        'bad-forward',
        `message names control sequence ${cs}, which CONTROL does not hold; REKEY is written by Vigil only`,
      );
    await control.waitFor(cs);
    return this.hopJudged(r, c, cs);
  }

  private hopJudged(
    r: LogRecord,
    c: Exclude<HopClass, { kind: 'dead' }>,
    cs: number | undefined,
  ): Promise<void> | undefined {
    const st = this.state;
    let ruleSet: RuleSet = st.ruleSet;
    if (cs !== undefined) {
      const held = this.d.control.ruleSetAt(cs);
      if (held === undefined)
        return this.outputs.dead(
          r,
          'bad-forward',
          `the rule set at control sequence ${cs} is no longer held by this worker`,
        );
      ruleSet = held;
    }
    const out = processRecord(st, downstreamRecord(c.src, c, r.seq, ruleSet));
    // Each record counts once: a forwarded event was counted `judged` where it was read.
    this.d.metrics.events.inc({ partition: this.p, outcome: out.skipped ?? c.kind });
    // The worker keeps rule sets from the oldest in force: this one's moved on.
    if (out.applied !== undefined) this.d.onApplied(this.d.partition, out.applied, undefined);
    return this.outputs.emit(r, out);
  }
}

/** The `partition` label of a partition's metrics: `<p>`, or `<p>~<space>` for a key space's downstream partition. */
export function partitionLabel(partition: number, space?: string): string {
  return space === undefined ? String(partition) : `${partition}~${space}`;
}
