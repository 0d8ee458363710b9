import {
  emptyRuleSet,
  type ControlOutcome,
  type Problem,
  type RuleLimits,
  type RuleSet,
} from '../rules/index.js';
import { foldControl } from '../protocol/index.js';
import type { ControlReader, ControlStream } from './control-stream.js';

/** One message of `CONTROL` after the rules core has judged it. */
export interface ControlEvent {
  readonly seq: number;
  /** When the message was stored in `CONTROL` (ms since the epoch). */
  readonly committedAt: number;
  readonly outcome:
    | ControlOutcome
    | { readonly ok: false; readonly ruleSet: RuleSet; readonly problems: readonly Problem[] };
  readonly data: Uint8Array;
}

/**
 * Follows `CONTROL` (on NATS with its own ordered consumer: `jetStreamControl`) and keeps the
 * rule set after every sequence (G1: every worker applies the same messages in the same order with
 * the same pure function). Partitions ask for the rule set at a marker's sequence and wait here
 * when it has not arrived.
 */
export class ControlFollower {
  private current: RuleSet = emptyRuleSet();
  /** Rule sets by the sequence after which they are in force, kept while a partition may still need them. */
  private readonly versions = new Map<number, RuleSet>([[0, this.current]]);
  private readonly committedAt = new Map<number, number>();
  private readonly waiters: { seq: number; resolve: () => void }[] = [];
  private reader: ControlReader | undefined;
  private headSeq = 0;
  private caughtUp = false;

  constructor(
    private readonly stream: ControlStream,
    private readonly limits: RuleLimits,
    private readonly onMessage: (e: ControlEvent) => void | Promise<void>,
  ) {}

  /** Sequence of the last control message applied here. */
  get seq(): number {
    return this.current.controlSeq;
  }

  /** True once every message that was in `CONTROL` at start-up has been applied. */
  get ready(): boolean {
    return this.caughtUp;
  }

  /** Starts following; resolves once caught up with the messages present at start. */
  async start(): Promise<void> {
    this.headSeq = await this.stream.head();
    this.reader = await this.stream.read();
    const caughtUp = this.waitFor(this.headSeq).then(() => {
      this.caughtUp = true;
    });
    void this.loop();
    await caughtUp;
  }

  private async loop(): Promise<void> {
    if (this.reader === undefined) return;
    for await (const m of this.reader) {
      const outcome = foldControl(this.current, m.data, m.seq, this.limits);
      this.current = outcome.ruleSet;
      this.versions.set(m.seq, outcome.ruleSet);
      this.committedAt.set(m.seq, m.committedAt);
      await this.onMessage({ seq: m.seq, committedAt: m.committedAt, outcome, data: m.data });
      for (let i = this.waiters.length - 1; i >= 0; i--) {
        const w = this.waiters[i];
        if (w !== undefined && w.seq <= m.seq) {
          this.waiters.splice(i, 1);
          w.resolve();
        }
      }
    }
  }

  /** Resolves once the message at `seq` has been applied here. */
  waitFor(seq: number): Promise<void> {
    if (seq <= this.current.controlSeq) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ seq, resolve }));
  }

  /** The last sequence `CONTROL` holds now (asks the server). */
  async streamHead(): Promise<number> {
    this.headSeq = await this.stream.head();
    return this.headSeq;
  }

  /** The rule set in force after `seq`; undefined when it was released or has not arrived. */
  ruleSetAt(seq: number): RuleSet | undefined {
    return this.versions.get(seq);
  }

  commitTime(seq: number): number | undefined {
    return this.committedAt.get(seq);
  }

  /** Forgets rule sets older than `seq` (every partition here has applied `seq` or later). */
  release(seq: number): void {
    for (const s of this.versions.keys()) if (s < seq) this.versions.delete(s);
    for (const s of this.committedAt.keys()) if (s < seq) this.committedAt.delete(s);
  }

  async stop(): Promise<void> {
    await this.reader?.close();
  }
}
