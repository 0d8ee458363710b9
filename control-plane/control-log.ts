import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type {
  ChangeMeta,
  ControlOutcome,
  Model,
  Problem,
  Rule,
  RuleLimits,
  RuleSet,
  StateChange,
} from '../rules/index.js';
import { emptyRuleSet } from '../rules/index.js';
import { ControlFollower, jetStreamControl, type ControlEvent } from '../jetstream/index.js';

/** One message of `CONTROL`, as the audit log shows it. */
export interface ChangeRecord {
  readonly seq: number;
  /** When `CONTROL` stored it (ms since the epoch). */
  readonly at: number;
  readonly op: string;
  readonly meta: ChangeMeta;
  /** Whether the rules core accepted it (a rejected one changed nothing and is on the DLQ). */
  readonly ok: boolean;
  readonly problems?: readonly Problem[];
  /** What it did to each rule it touched. */
  readonly changes: readonly StateChange[];
  /** Models it created, replaced or deleted. */
  readonly models: readonly string[];
}

/** One version of one rule: the change that touched it and the rule as it was right after. */
export interface RuleRevision {
  readonly seq: number;
  readonly at: number;
  readonly op: string;
  readonly action: StateChange['action'];
  /** Why the rule's state was reset, when it was. */
  readonly stateReason?: string;
  readonly meta: ChangeMeta;
  /** The definition after this change; absent once deleted. */
  readonly rule: Rule | undefined;
  /** The definition's version after this change (= the sequence of the upsert that made it current). */
  readonly version: number | undefined;
  readonly paused: boolean;
}

/** One change of one model. */
export interface ModelRevision {
  readonly seq: number;
  readonly at: number;
  readonly op: string;
  readonly meta: ChangeMeta;
  readonly deleted: boolean;
}

const decoder = new TextDecoder();

function metaOf(message: unknown): ChangeMeta {
  const m = (message as { meta?: unknown } | undefined)?.meta;
  if (typeof m !== 'object' || m === null) return {};
  const out: Record<string, string> = {};
  for (const k of ['actor', 'reason', 'requestId'] as const) {
    const v = (m as Record<string, unknown>)[k];
    if (typeof v === 'string') out[k] = v;
  }
  return out;
}

function opOf(data: Uint8Array): string {
  try {
    const op = (JSON.parse(decoder.decode(data)) as { op?: unknown }).op;
    return typeof op === 'string' ? op : '?';
  } catch {
    return '?';
  }
}

/**
 * The control plane's view of `CONTROL`, the source of truth: it follows the stream with an
 * ordered consumer and folds every message with the rules core's `applyControl` (the service's
 * own {@link ControlFollower}, so the fold is the very function every shard runs). From the fold
 * it keeps the current rule set and, per rule and per model, every revision with who, when and why.
 */
export class ControlLog {
  private current: RuleSet = emptyRuleSet();
  private readonly follower: ControlFollower;
  private readonly records: ChangeRecord[] = [];
  private readonly rules = new Map<string, RuleRevision[]>();
  private readonly models = new Map<string, ModelRevision[]>();
  private lastAccepted = 0;

  constructor(js: JetStreamClient, jsm: JetStreamManager, limits: RuleLimits) {
    this.follower = new ControlFollower(jetStreamControl(js, jsm), limits, (e) => this.fold(e));
  }

  /** Starts following; resolves once every message already in `CONTROL` is folded. */
  async start(): Promise<void> {
    await this.follower.start();
  }

  async stop(): Promise<void> {
    await this.follower.stop();
  }

  /** The rule set after the last message folded. */
  get ruleSet(): RuleSet {
    return this.current;
  }

  /** Sequence of the last message folded. */
  get seq(): number {
    return this.current.controlSeq;
  }

  /** Sequence of the last accepted message: the version every partition should end up running. */
  get latestAccepted(): number {
    return this.lastAccepted;
  }

  /** Resolves once the message at `seq` is folded; rejects after `timeoutMs`. */
  async waitFor(seq: number, timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`control sequence ${seq} not folded after ${timeoutMs} ms`)),
        timeoutMs,
      );
    });
    try {
      await Promise.race([this.follower.waitFor(seq), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** The last sequence `CONTROL` holds now (asks the server). */
  streamHead(): Promise<number> {
    return this.follower.streamHead();
  }

  /** The audit record of one sequence. */
  record(seq: number): ChangeRecord | undefined {
    // Sequences are dense from 1 unless the stream was purged: search from the end.
    for (let i = this.records.length - 1; i >= 0; i--) {
      const r = this.records[i] as ChangeRecord;
      if (r.seq === seq) return r;
      if (r.seq < seq) return undefined;
    }
    return undefined;
  }

  /** Audit records with `seq > after`, oldest first, at most `limit`. */
  recordsAfter(after: number, limit: number): readonly ChangeRecord[] {
    return this.records.filter((r) => r.seq > after).slice(0, limit);
  }

  /** Every revision of a rule, oldest first (empty when it never existed). */
  ruleHistory(id: string): readonly RuleRevision[] {
    return this.rules.get(id) ?? [];
  }

  /** Every change of a model, oldest first. */
  modelHistory(id: string): readonly ModelRevision[] {
    return this.models.get(id) ?? [];
  }

  private fold(e: ControlEvent): void {
    const outcome = e.outcome as ControlOutcome | { ok: false; problems: readonly Problem[] };
    const before = this.current;
    this.current = e.outcome.ruleSet;
    // The follower keeps every rule set a partition may ask for; the control plane needs only the last.
    this.follower.release(e.seq);
    if (!outcome.ok) {
      let meta: ChangeMeta = {};
      try {
        meta = metaOf(JSON.parse(decoder.decode(e.data)));
      } catch {
        meta = {};
      }
      this.records.push({
        seq: e.seq,
        at: e.committedAt,
        op: opOf(e.data),
        meta,
        ok: false,
        problems: outcome.problems,
        changes: [],
        models: [],
      });
      return;
    }
    this.lastAccepted = e.seq;
    const meta = metaOf(outcome.message);
    const op = outcome.message.op;
    for (const c of outcome.changes) {
      const r = this.current.rules.get(c.ruleId);
      const list = this.rules.get(c.ruleId) ?? [];
      list.push({
        seq: e.seq,
        at: e.committedAt,
        op,
        action: c.action,
        ...(c.reason === undefined ? {} : { stateReason: c.reason }),
        meta,
        rule: r?.def,
        version: r?.version,
        paused: r?.paused ?? false,
      });
      this.rules.set(c.ruleId, list);
    }
    // applyControl keeps an untouched model's compiled object, so identity tells what changed.
    const touched: string[] = [];
    for (const [id, m] of this.current.models) if (before.models.get(id) !== m) touched.push(id);
    for (const id of before.models.keys()) if (!this.current.models.has(id)) touched.push(id);
    for (const id of touched) {
      const list = this.models.get(id) ?? [];
      list.push({ seq: e.seq, at: e.committedAt, op, meta, deleted: !this.current.models.has(id) });
      this.models.set(id, list);
    }
    this.records.push({
      seq: e.seq,
      at: e.committedAt,
      op,
      meta,
      ok: true,
      changes: outcome.changes,
      models: touched,
    });
  }
}

/** The definition of a model in force, by id. */
export function modelDef(rs: RuleSet, id: string): Model | undefined {
  return rs.models.get(id)?.def;
}
