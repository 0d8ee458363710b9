import {
  createPartition,
  emptyRuleSet,
  processRecord,
  type Alert,
  type PartitionState,
  type ProcessResult,
  type RuleLimits,
  type RuleSet,
} from '../rules/index.js';
import { classifyRecord } from '../protocol/index.js';

/** One message of `EVENTS`, as a replay reads it. */
export interface ReplayMessage {
  readonly seq: number;
  readonly subject: string;
  readonly data: Uint8Array;
  /** When JetStream stored it: the default event time. */
  readonly storedAt: number;
}

/** Which rules judge the replayed events. */
export type ReplayRules =
  /** The rules in force at each event: each partition's markers switch rule sets, as live. */
  | { readonly kind: 'history'; readonly versions: ReadonlyMap<number, RuleSet> }
  /** One fixed rule set for every event; markers change nothing. */
  | { readonly kind: 'candidate'; readonly ruleSet: RuleSet };

/**
 * Replays partition logs through the rules core in this process — the same `processRecord` the
 * shards run, and the same classification of records as a partition runner: markers, ticks,
 * probes, reserved and mis-partitioned keys. Nothing is published.
 */
export class Replay {
  private readonly states: PartitionState[];

  constructor(
    private readonly rules: ReplayRules,
    private readonly partitions: number,
    outOfOrderMs: number,
    limits: RuleLimits,
    /** The rule set in force in each partition when the replay starts (history only). */
    initial: (partition: number) => RuleSet = () => emptyRuleSet(),
  ) {
    this.states = Array.from({ length: partitions }, (_, p) =>
      createPartition(rules.kind === 'candidate' ? rules.ruleSet : initial(p), {
        partition: p,
        outOfOrderMs,
        limits,
      }),
    );
  }

  /** Feeds one message; returns the alerts it produced (empty for messages a shard skips). */
  feed(m: ReplayMessage): readonly Alert[] {
    const p = Number(m.subject.slice(m.subject.lastIndexOf('.') + 1));
    const st = this.states[p];
    if (st === undefined) return [];
    const c = classifyRecord(m.subject, m.data, p, this.partitions);
    let out: ProcessResult;
    switch (c.kind) {
      case 'marker': {
        if (this.rules.kind === 'candidate') return [];
        const target = this.rules.versions.get(c.controlSeq);
        // A marker naming a sequence CONTROL does not hold is dead-lettered live: it changes nothing.
        if (target === undefined || target.controlSeq <= st.ruleSet.controlSeq) return [];
        out = processRecord(st, { kind: 'marker', seq: m.seq, ruleSet: target });
        break;
      }
      case 'tick':
        out = processRecord(st, { kind: 'tick', seq: m.seq, ts: c.ts, storedAt: m.storedAt });
        break;
      case 'event':
        out = processRecord(st, {
          kind: 'event',
          seq: m.seq,
          key: c.key,
          data: m.data,
          publishTs: m.storedAt,
        });
        break;
      // Probes and dead letters are judged by no rule live either.
      case 'probe':
      case 'dead':
        return [];
    }
    return out.alerts;
  }
}
