import {
  createDownstream,
  createPartition,
  emptyRuleSet,
  processRecord,
  type Alert,
  type HopMessage,
  type PartitionState,
  type RuleLimits,
  type RuleSet,
} from '../rules/index.js';
import {
  downstreamRecord,
  partitionOf,
  partitionRecord,
  type StoredMessage,
} from '../protocol/index.js';

/** One message of `EVENTS`, as a replay reads it. */
export type ReplayMessage = StoredMessage;

/** Which rules judge the replayed events. */
export type ReplayRules =
  /** The rules in force at each event: each partition's markers switch rule sets, as live. */
  | { readonly kind: 'history'; readonly versions: ReadonlyMap<number, RuleSet> }
  /** One fixed rule set for every event; markers change nothing. */
  | { readonly kind: 'candidate'; readonly ruleSet: RuleSet };

/** The service's re-keying hop, which a replay runs as the service does. */
export interface ReplayRekey {
  readonly partitionKey: readonly string[];
  readonly reportEveryMs: number;
}

/**
 * Replays partition logs through the rules core in this process — the same `processRecord` the
 * shards run, and the same classification of records as a partition runner: markers, ticks,
 * probes, reserved and mis-partitioned keys. With the re-keying hop, what a partition sends the
 * key spaces' partitions goes to theirs here at once (any interleaving of the partitions gives
 * them the same alerts). Nothing is published.
 */
export class Replay {
  private readonly states: PartitionState[];
  /** The key spaces' partitions, by `<p>~<space>`, and the records each has read. */
  private readonly downstream = new Map<string, { state: PartitionState; seq: number }>();

  constructor(
    private readonly rules: ReplayRules,
    private readonly partitions: number,
    outOfOrderMs: number,
    private readonly limits: RuleLimits,
    /** The rule set in force in each partition when the replay starts (history only). */
    initial: (partition: number) => RuleSet = () => emptyRuleSet(),
    rekey?: ReplayRekey,
  ) {
    this.states = Array.from({ length: partitions }, (_, p) =>
      createPartition(rules.kind === 'candidate' ? rules.ruleSet : initial(p), {
        partition: p,
        outOfOrderMs,
        limits,
        ...(rekey === undefined
          ? {}
          : {
              rekey: {
                partitionKey: rekey.partitionKey,
                reportEveryMs: rekey.reportEveryMs,
                partitions,
                partitionOf,
              },
            }),
      }),
    );
  }

  /** Feeds one message; returns the alerts it produced (empty for messages a shard skips). */
  feed(m: ReplayMessage): readonly Alert[] {
    const r = partitionRecord(
      m,
      this.partitions,
      // A candidate is one fixed rule set: markers change nothing.
      (c) => this.ruleSetAt(c),
      (p) => this.states[p]?.ruleSet.controlSeq ?? 0,
    );
    const st = r === undefined ? undefined : this.states[r.partition];
    if (r === undefined || st === undefined) return [];
    const out = processRecord(st, r.record);
    if (out.sent.length === 0) return out.alerts;
    const alerts = [...out.alerts];
    for (const x of out.sent) alerts.push(...this.hop(r.partition, x));
    return alerts;
  }

  private ruleSetAt(c: number): RuleSet | undefined {
    const rules = this.rules;
    return rules.kind === 'candidate' ? undefined : rules.versions.get(c);
  }

  /** Hands a message from source partition `src` to its key space's partition. */
  private hop(src: number, x: HopMessage): readonly Alert[] {
    const id = `${x.partition}~${x.space}`;
    let d = this.downstream.get(id);
    if (d === undefined) {
      const state = createDownstream(emptyRuleSet(), {
        partition: x.partition,
        space: x.space,
        sources: this.partitions,
        limits: this.limits,
      });
      this.downstream.set(id, (d = { state, seq: 0 }));
    }
    const rules = this.rules;
    const ruleSet =
      rules.kind === 'candidate'
        ? rules.ruleSet
        : (rules.versions.get(x.controlSeq) ?? emptyRuleSet());
    const seq = ++d.seq;
    return processRecord(d.state, downstreamRecord(src, x, seq, ruleSet)).alerts;
  }
}
