import type { PartitionRecord, RuleSetAt } from '../rules/index.js';
import { classifyRecord } from './record-class.js';

/** A stored message of `EVENTS`, as a reader of the stream gets it. */
export interface StoredMessage {
  readonly seq: number;
  readonly subject: string;
  readonly data: Uint8Array;
  /** When JetStream stored it (ms): the default event time, and the cap on a record's time. */
  readonly storedAt: number;
}

/**
 * A stored message of `EVENTS` as the rules core takes it, for the readers that replay a log in
 * one go (the back-test, the tests' single-threaded reference): its partition and its record.
 * Undefined for what no rule judges live either — a probe, a dead letter, a marker of a rule set
 * `ruleSetAt` does not hold (live: refused as forged) or one the partition has in force already.
 */
export function partitionRecord(
  m: StoredMessage,
  partitions: number,
  ruleSetAt: RuleSetAt,
  inForce: (partition: number) => number,
): { readonly partition: number; readonly record: PartitionRecord } | undefined {
  const p = Number(m.subject.slice(m.subject.lastIndexOf('.') + 1));
  if (!Number.isInteger(p) || p < 0 || p >= partitions) return undefined;
  const c = classifyRecord(m.subject, m.data, p, partitions);
  switch (c.kind) {
    case 'marker': {
      const ruleSet = ruleSetAt(c.controlSeq);
      if (ruleSet === undefined || c.controlSeq <= inForce(p)) return undefined;
      return { partition: p, record: { kind: 'marker', seq: m.seq, ruleSet } };
    }
    case 'tick':
      return { partition: p, record: { kind: 'tick', seq: m.seq, ts: c.ts, storedAt: m.storedAt } };
    case 'event':
      return {
        partition: p,
        record: { kind: 'event', seq: m.seq, key: c.key, data: m.data, publishTs: m.storedAt },
      };
    case 'probe':
    case 'dead':
      return undefined;
  }
}
