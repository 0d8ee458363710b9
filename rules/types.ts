/**
 * The rule language: rules, models, control messages and alerts.
 * These are the JSON shapes users write; validation turns unknown input into them.
 */

/** A fact reference, usable as a condition's `value` (json-rules-engine format). */
export interface FactReference {
  readonly fact: string;
  readonly path?: string;
  readonly params?: Readonly<Record<string, unknown>>;
}

/** A leaf condition: `<fact + path + params> <operator> <value>`. */
export interface LeafCondition {
  readonly fact: string;
  readonly operator: string;
  readonly value: unknown;
  readonly path?: string;
  readonly params?: Readonly<Record<string, unknown>>;
  readonly priority?: number;
  readonly name?: string;
}

export interface AllCondition {
  readonly all: readonly Condition[];
  readonly priority?: number;
  readonly name?: string;
}
export interface AnyCondition {
  readonly any: readonly Condition[];
  readonly priority?: number;
  readonly name?: string;
}
export interface NotCondition {
  readonly not: Condition;
  readonly priority?: number;
  readonly name?: string;
}

/** A json-rules-engine condition tree. */
export type Condition = LeafCondition | AllCondition | AnyCondition | NotCondition;
/** The root of a condition tree is always boolean, as in json-rules-engine. */
export type TopCondition = AllCondition | AnyCondition | NotCondition;

/** Comparison of an aggregate with a threshold. */
export const Comparison = { gte: '>=', gt: '>', lte: '<=', lt: '<', eq: '==', ne: '!=' } as const;
export type Comparison = (typeof Comparison)[keyof typeof Comparison];

export const Aggregate = {
  count: 'count',
  sum: 'sum',
  avg: 'avg',
  min: 'min',
  max: 'max',
  distinct: 'distinct',
} as const;
export type Aggregate = (typeof Aggregate)[keyof typeof Aggregate];

/** `aggregate(field)` over a window of the key's matching events, compared with `value`. */
export interface ThresholdPattern {
  readonly kind: 'threshold';
  readonly aggregate: Aggregate;
  /** Numeric field to aggregate (any field for `distinct`); not used by `count`. */
  readonly field?: string;
  /** Window length: milliseconds or a duration string such as `10m`. */
  readonly window: string | number;
  /** `sliding` (default): look back `[t − window, t]` at every event. `tumbling`: fixed windows closed by the watermark. */
  readonly windowType?: 'sliding' | 'tumbling';
  readonly operator: Comparison;
  readonly value: number;
}

export const Contiguity = { next: 'next', followedBy: 'followedBy' } as const;
export type Contiguity = (typeof Contiguity)[keyof typeof Contiguity];

export interface SequenceStep {
  readonly name: string;
  /** Event types this step accepts (default: any of the rule's `on`). */
  readonly on?: readonly string[];
  /** Condition on the event; may reference earlier steps' events as facts `step:<name>`. */
  readonly when?: TopCondition;
  /** How this step's events relate to the previous matched event. Default `followedBy`. */
  readonly contiguity?: Contiguity;
  /** Number of events this step must match (default 1). */
  readonly times?: number;
}

export const AfterMatch = { skipPastLastEvent: 'skip-past-last-event', noSkip: 'no-skip' } as const;
export type AfterMatch = (typeof AfterMatch)[keyof typeof AfterMatch];

export interface SequencePattern {
  readonly kind: 'sequence';
  readonly steps: readonly SequenceStep[];
  /** The whole match must fit in `[first.ts, first.ts + within)`. */
  readonly within: string | number;
  readonly afterMatch?: AfterMatch;
}

/** A rule's events (the triggers) not followed by an `expect` event of the same key within `within`. */
export interface AbsencePattern {
  readonly kind: 'absence';
  readonly within: string | number;
  readonly expect: { readonly on: readonly string[]; readonly when?: TopCondition };
}

export type Pattern = ThresholdPattern | SequencePattern | AbsencePattern;

export interface AlertSpec {
  readonly severity?: string;
  /** Title template: `{{field}}` is replaced by the event's field, `{{key}}` by the rule's key. */
  readonly title?: string;
  /** Suppress repeats of this rule for the same key for this long (event time). */
  readonly suppressFor?: string | number;
}

/** A rule as users write it. */
export interface Rule {
  readonly id: string;
  readonly description?: string;
  /** Event types the rule applies to; `"*"` for every type. */
  readonly on: readonly string[];
  /**
   * Field whose value keys the rule's state, or a list of fields whose values together do (a
   * composite key); default: the event's partition key.
   */
  readonly key?: string | readonly string[];
  readonly when?: TopCondition;
  readonly pattern?: Pattern;
  readonly alert?: AlertSpec;
  /**
   * Removes a key's state for this rule once event time is this far past the newest event it
   * holds (or its last alert), even where the window, `within` or `suppressFor` would keep it
   * longer: a bound on memory that changes outcomes when shorter than those. Default: none.
   */
  readonly stateTtl?: string | number;
}

export interface Feature {
  readonly name: string;
  /** Event field the feature reads (default: `name`). */
  readonly field?: string;
  readonly transform?: 'identity' | 'log1p' | 'bool';
  /** Value when the field is missing or not a finite number (default 0). */
  readonly default?: number;
  readonly clamp?: readonly [number, number];
}

export interface ScorerModel {
  readonly id: string;
  readonly kind: 'logistic' | 'linear';
  readonly description?: string;
  readonly features: readonly Feature[];
  readonly weights: Readonly<Record<string, number>>;
  readonly bias?: number;
  /** Clamp of the score (after the sigmoid for `logistic`). */
  readonly clamp?: readonly [number, number];
}

/** A lookup table: a set (`values`) or a map (`entries`). */
export interface LookupModel {
  readonly id: string;
  readonly kind: 'lookup';
  readonly description?: string;
  readonly values?: readonly (string | number)[];
  readonly entries?: Readonly<Record<string, unknown>>;
}

export type Model = ScorerModel | LookupModel;

export interface ChangeMeta {
  readonly actor?: string;
  readonly reason?: string;
  readonly requestId?: string;
}

/** A control message on `vigil.control`. */
export type ControlMessage =
  | { readonly op: 'upsert-rule'; readonly rule: Rule; readonly meta?: ChangeMeta }
  | { readonly op: 'delete-rule'; readonly id: string; readonly meta?: ChangeMeta }
  | { readonly op: 'pause-rule'; readonly id: string; readonly meta?: ChangeMeta }
  | { readonly op: 'resume-rule'; readonly id: string; readonly meta?: ChangeMeta }
  | { readonly op: 'upsert-model'; readonly model: Model; readonly meta?: ChangeMeta }
  | { readonly op: 'delete-model'; readonly id: string; readonly meta?: ChangeMeta }
  | { readonly op: 'clear-state'; readonly ruleId?: string; readonly meta?: ChangeMeta }
  | {
      readonly op: 'replace-all';
      readonly rules: readonly Rule[];
      readonly models?: readonly Model[];
      readonly meta?: ChangeMeta;
    }
  | {
      readonly op: 'changeset';
      readonly changes: readonly ControlChange[];
      readonly meta?: ChangeMeta;
    };

/** The ops a changeset may hold (every op but `changeset` itself). */
export type ControlChange = Exclude<ControlMessage, { op: 'changeset' }>;
export type ControlOp = ControlMessage['op'];

export const CONTROL_OPS: readonly ControlOp[] = [
  'upsert-rule',
  'delete-rule',
  'pause-rule',
  'resume-rule',
  'upsert-model',
  'delete-model',
  'clear-state',
  'replace-all',
  'changeset',
];

/** A log position that caused an alert. */
export interface EventRef {
  readonly seq: number;
  readonly id?: string;
  readonly ts: number;
}

/** An alert, the same object wherever it is read. */
export interface Alert {
  readonly id: string;
  readonly ruleId: string;
  readonly ruleVersion: number;
  readonly severity: string;
  readonly title: string;
  readonly key: string;
  readonly partition: number;
  readonly ts: number;
  readonly events: readonly EventRef[];
  readonly values: Readonly<Record<string, unknown>>;
}
