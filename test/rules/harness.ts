import {
  applyControl,
  createPartition,
  emptyRuleSet,
  processRecord,
  writeCheckpointParts,
  type Alert,
  type CheckpointHashes,
  type CheckpointParts,
  type PartitionState,
  type ProcessResult,
  type Rule,
  type RuleSet,
} from '../../rules/index.js';

/** One partition's checkpoint as Redis holds it: the last meta, and its keyed-state, buffered-event and lineage-number hashes. */
export interface MemoryStore extends CheckpointHashes {
  meta: string;
}

export const memoryStore = (meta = ''): MemoryStore => ({
  meta,
  fields: new Map(),
  buffered: new Map(),
  lineages: new Map(),
});

/** Writes a checkpoint into the store as the store's SAVE script does (the fence checks aside). */
export function writeParts(store: MemoryStore, parts: CheckpointParts): void {
  writeCheckpointParts(store, parts);
  store.meta = parts.meta;
}

/** Applies control messages in order (sequences 1, 2, …) and fails loudly on a rejection. */
export function ruleSetOf(...messages: unknown[]): RuleSet {
  let rs = emptyRuleSet();
  for (const m of messages) {
    const o = applyControl(rs, m, rs.controlSeq + 1);
    if (!o.ok) throw new Error(`control message rejected: ${JSON.stringify(o.problems)}`);
    rs = o.ruleSet;
  }
  return rs;
}

export const upsert = (rule: Rule): unknown => ({ op: 'upsert-rule', rule });

/** Feeds records to one partition with increasing sequence numbers and collects what they produce. */
export class Feed {
  readonly state: PartitionState;
  seq = 0;
  readonly results: ProcessResult[] = [];

  constructor(ruleSet: RuleSet, outOfOrderMs = 0) {
    this.state = createPartition(ruleSet, { partition: 3, outOfOrderMs });
  }

  event(fields: Record<string, unknown>, key = 'k1'): ProcessResult {
    return this.push(
      processRecord(this.state, {
        kind: 'event',
        seq: ++this.seq,
        key,
        data: JSON.stringify(fields),
        publishTs: typeof fields.ts === 'number' ? fields.ts : 0,
      }),
    );
  }

  tick(ts: number): ProcessResult {
    return this.push(processRecord(this.state, { kind: 'tick', seq: ++this.seq, ts }));
  }

  marker(ruleSet: RuleSet): ProcessResult {
    return this.push(processRecord(this.state, { kind: 'marker', seq: ++this.seq, ruleSet }));
  }

  private push(r: ProcessResult): ProcessResult {
    this.results.push(r);
    return r;
  }

  get alerts(): Alert[] {
    return this.results.flatMap((r) => r.alerts);
  }

  /** Alerts as `ruleId@ts` strings, for compact assertions. */
  get fired(): string[] {
    return this.alerts.map((a) => `${a.ruleId}@${a.ts}`);
  }
}
