import {
  createPartition,
  emptyRuleSet,
  processRecord,
  type Alert,
  type PartitionState,
  type RuleLimits,
  type RuleSet,
} from '../rules/index.js';
import { partitionRecord, type StoredMessage } from '../protocol/index.js';

/** One message of `EVENTS`, as a replay reads it. */
export type ReplayMessage = StoredMessage;

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
    const rules = this.rules;
    const r = partitionRecord(
      m,
      this.partitions,
      // A candidate is one fixed rule set: markers change nothing.
      (c) => (rules.kind === 'candidate' ? undefined : rules.versions.get(c)),
      (p) => this.states[p]?.ruleSet.controlSeq ?? 0,
    );
    const st = r === undefined ? undefined : this.states[r.partition];
    return r === undefined || st === undefined ? [] : processRecord(st, r.record).alerts;
  }
}
