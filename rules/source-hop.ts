/**
 * The source side of the re-keying hop (see `downstream.ts`): which key spaces a source partition
 * sends to, what it sends each downstream partition, and when it reports.
 *
 * Every message from a source to one downstream partition is numbered (1, 2, …), forwards and
 * reports alike, and the downstream takes message n only after n − 1. The numbers are a function
 * of the source's log (reports go out at epoch markers and as event time passes, never by the
 * clock), so a source restored from a checkpoint numbers what it sends again exactly as before:
 * the downstream drops what it has taken (a duplicate) and what comes before its turn (a gap, left
 * by a publish that failed: the source sends again from there, in order).
 *
 * The numbering has an origin: the source log's offset where it began (0, or the offset of a
 * checkpoint written without the hop, when the hop was turned on over existing state). A
 * downstream partition that has taken messages of an older origin starts again at message 1 of a
 * newer one and drops what still comes of the older: turning the hop off and on again cannot make
 * it take a new message for a duplicate of an old one.
 */
import type { CompiledRule } from './compile-rule.js';
import { rekeyed } from './downstream.js';
import { SnapshotError } from './errors.js';
import { keySpaceOf } from './rule-key.js';
import type { RuleSet } from './rule-set.js';

/** Which rules are re-keyed, and where their events go: given to a source partition. */
export interface RekeyOptions {
  /**
   * The event field(s) the partition key is: rules keyed by exactly these stay in the source
   * partition (their key is the record's). Unset: every rule with a `key` is re-keyed.
   */
  readonly partitionKey?: readonly string[];
  /** How many partitions each key space has (those of the event log). */
  readonly partitions: number;
  /** The partition of a key among `partitions` (the event log's partitioner). */
  readonly partitionOf: (key: string, partitions: number) => number;
  /** A source reports its watermark when it has moved this far (ms of event time) since its last report. Default 1,000. */
  readonly reportEveryMs?: number;
}

/** What a source sends one downstream partition: the `n`-th message from it there. */
export type HopMessage =
  /** An event some rule of `space` needs, judged at the source under the rules of `controlSeq`. */
  | {
      readonly kind: 'forward';
      readonly space: string;
      readonly partition: number;
      /** The source log's offset where this numbering began (see above). */
      readonly origin: number;
      readonly n: number;
      /** The event's position in the source log (in `EVENTS`, unique over all partitions). */
      readonly srcSeq: number;
      readonly controlSeq: number;
      /** The source's watermark after the event. */
      readonly watermark: number;
      readonly key: string;
      readonly ts: number;
      /** When the source log stored it: the downstream parses the text exactly as the source did. */
      readonly publishTs: number;
      readonly text: string;
    }
  /** The source's watermark, the rule set in force there and its horizon (see `sourceHorizon`). */
  | {
      readonly kind: 'report';
      readonly space: string;
      readonly partition: number;
      readonly origin: number;
      readonly n: number;
      readonly controlSeq: number;
      readonly watermark: number;
      readonly horizon: number;
    };

/** A source partition's side of the hop. */
export class SourceHop {
  /** The key space of the partition key, whose rules stay at the source. */
  readonly localSpace: string | undefined;
  readonly reportEveryMs: number;
  /** Per key space it sends to, per downstream partition: the number of the last message sent. */
  readonly sent = new Map<string, Float64Array>();
  /** The watermark at the last report (-Infinity: none yet). */
  lastReport = -Infinity;
  /** The source log's offset where the numbering began (see above). */
  origin = 0;

  constructor(readonly options: RekeyOptions) {
    const { partitions, reportEveryMs = 1000 } = options;
    if (!Number.isSafeInteger(partitions) || partitions < 1)
      throw new RangeError(`rekey partitions must be a positive integer, got ${partitions}`);
    if (!Number.isSafeInteger(reportEveryMs) || reportEveryMs < 1)
      throw new RangeError(`reportEveryMs must be a positive integer, got ${reportEveryMs}`);
    this.localSpace =
      options.partitionKey === undefined ? undefined : keySpaceOf(options.partitionKey);
    this.reportEveryMs = reportEveryMs;
  }

  /** Whether the source sends a rule's events on. */
  sendsOn(rule: CompiledRule): boolean {
    return rekeyed(rule, this.localSpace);
  }

  /**
   * Adds the key spaces of a rule set's re-keyed rules. A key space once added stays: its
   * downstream partitions need this source's reports to see the change that ends its rules.
   */
  addSpaces(rs: RuleSet): void {
    for (const rule of rs.rules.values())
      if (this.sendsOn(rule) && !this.sent.has(rule.keySpace as string))
        this.sent.set(rule.keySpace as string, new Float64Array(this.options.partitions));
  }

  /** The partition of `key` in every key space. */
  partitionOf(key: string): number {
    return this.options.partitionOf(key, this.options.partitions);
  }

  /** The downstream partition of `key`, and the number of the next message to it. */
  route(space: string, key: string): { partition: number; n: number } {
    const p = this.partitionOf(key);
    return { partition: p, n: this.number(space, p) };
  }

  /** Numbers the next message to partition `p` of `space`. */
  number(space: string, p: number): number {
    let counts = this.sent.get(space);
    if (counts === undefined)
      this.sent.set(space, (counts = new Float64Array(this.options.partitions)));
    return (counts[p] = (counts[p] as number) + 1);
  }

  /** Whether a source at `watermark` reports now (it does at every epoch marker too). */
  due(watermark: number): boolean {
    return (
      watermark > -Infinity &&
      (this.lastReport === -Infinity || watermark - this.lastReport >= this.reportEveryMs)
    );
  }

  /** For a checkpoint's meta. */
  toJSON(): SourceHopJSON {
    return {
      sent: [...this.sent].map(([space, counts]) => [space, [...counts]]),
      lastReport: Number.isFinite(this.lastReport) ? this.lastReport : null,
      origin: this.origin,
      local: this.localSpace ?? null,
    };
  }

  /** @throws SnapshotError when the JSON does not describe the hop of these options. */
  restore(json: SourceHopJSON): void {
    const p = this.options.partitions;
    if (
      !Array.isArray(json?.sent) ||
      json.sent.some(([s, c]) => typeof s !== 'string' || !Array.isArray(c) || c.length !== p)
    )
      throw new SnapshotError(
        `the checkpoint's re-keying counts are not a list per key space of ${p} partitions: was the partition count changed?`,
      );
    for (const [space, counts] of json.sent) this.sent.set(space, Float64Array.from(counts));
    this.lastReport = json.lastReport ?? -Infinity;
    this.origin = json.origin ?? 0;
  }
}

/** A source's side of the hop in a checkpoint's meta. */
export interface SourceHopJSON {
  readonly sent: readonly (readonly [space: string, counts: readonly number[]])[];
  readonly lastReport: number | null;
  /** Absent in checkpoints written before numberings had origins: 0. */
  readonly origin?: number;
  /** The key space of the partition key it was written with (null: none). */
  readonly local?: string | null;
}
