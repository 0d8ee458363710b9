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
import { isSmallWindow } from '../../rules/cep/small-window.js';
import { StateList } from '../../rules/keyed-states.js';

/** One (key, lineage) state of a partition, as {@link allStates} lists them. */
export interface HeldState {
  key: string;
  sid: string;
  sup: number | undefined;
  op: unknown;
}

/** Every decoded (key, lineage) state of a partition, keys in the order they hold state. */
export function allStates(st: PartitionState): HeldState[] {
  const out: HeldState[] = [];
  for (const key of st.states.keys())
    st.states
      .statesOf(st.states.keyNumber(key))
      .forEach((sid, sup, op) => out.push({ key, sid, sup, op }));
  return out;
}

/** A copy of one decoded key's states (empty when it holds none). */
export function keyStates(st: PartitionState, key: string): StateList {
  const list = new StateList();
  const k = st.states.keyNumber(key);
  if (k < 0) return list;
  st.states.statesOf(k).forEach((sid, sup, op) => list.add(sid, sup, op));
  list.exp = st.states.exp(k);
  return list;
}

/**
 * Throws unless every small window a partition's states hold is held by one state alone, and its
 * arena has no other record in use: no window leaked, none freed while still held.
 */
export function expectWindowsOwned(st: PartitionState): void {
  const held = new Set<number>();
  for (const { key, sid, op } of allStates(st)) {
    if (!isSmallWindow(op)) continue;
    if (held.has(op)) throw new Error(`small window ${op} held twice (again by ${key} ${sid})`);
    held.add(op);
  }
  if (held.size !== st.windows.live)
    throw new Error(`${st.windows.live} small windows in use, ${held.size} held by states`);
}

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
