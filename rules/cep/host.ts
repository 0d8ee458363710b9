import type { CompiledRule } from '../compile-rule.js';
import type { RuleLimits } from '../limits.js';
import type { ModelRegistry } from '../models.js';
import type { EventRef } from '../types.js';
import type { WindowArena } from './small-window.js';

/** Keyed state of one rule (lineage) and one key. `op` belongs to the rule's pattern operator. */
export interface KeyState {
  /** Event time of the last alert emitted, for `alert.suppressFor`. */
  sup: number | undefined;
  op: unknown;
}

/**
 * The operator state of kind `k` a key holds, or a new one from `make` (which replaces whatever
 * else it held). `make` should be a module-level function, so that a call allocates nothing.
 */
export function opState<S extends { readonly k: string }>(
  ks: KeyState,
  k: S['k'],
  make: () => S,
): S {
  const s = ks.op as S | undefined;
  if (s?.k === k) return s;
  const made = make();
  ks.op = made;
  return made;
}

/**
 * A key state with both fields in place from the start: V8 gives an empty literal room for four
 * properties (40 bytes instead of 56).
 */
export function newKeyState(
  sup: number | undefined = undefined,
  op: unknown = undefined,
): KeyState {
  return { sup, op };
}

/**
 * One event as an operator sees it, after the rule's type and `when` filters. The partition reuses
 * one for all the rules an event meets: an operator may keep `ref`, `event` and `models`, never
 * the object itself.
 */
export interface OperatorEvent {
  readonly event: Readonly<Record<string, unknown>>;
  readonly ref: EventRef;
  readonly key: string;
  readonly models: ModelRegistry;
  /** The event holds a hostile object (found when it was parsed; see `hasHostileObject`). */
  readonly hostile: boolean;
  /** The event passed the rule's `on` and `when` (for absence: it is a trigger). */
  readonly trigger: boolean;
  /** Absence only: the event is one the rule expects (`expect.on` and `expect.when`). */
  readonly expected: boolean;
}

/** What an operator may do besides changing its keyed state. */
export interface OperatorHost {
  readonly limits: RuleLimits;
  /** The partition's small windows (see `small-window.ts`). */
  readonly windows: WindowArena;
  /** Calls the operator's `onTimer` for this rule lineage and key when the watermark reaches `time`. */
  schedule(time: number, rule: CompiledRule, key: string): void;
  /** Emits an alert (subject to suppression); `idParts` makes its id unique and deterministic. */
  alert(rule: CompiledRule, ks: KeyState, a: AlertDraft): void;
  /** Reports that the rule could not use this event (the event goes on to other rules). */
  error(rule: CompiledRule, e: OperatorEvent, message: string, cause?: unknown): void;
  /** Reports state dropped because a per-key limit was reached. */
  overflow(rule: CompiledRule, key: string, dropped: number, limit: string): void;
}

/**
 * A pattern operator (threshold, sequence, absence): what the partition calls for one rule lineage
 * and one key. Its state lives in `KeyState.op` (a small window's entries in `host.windows`).
 */
export interface PatternOperator<P> {
  /** One event that passed the rule's `on` and `when` (for absence: any event it must see). */
  onEvent(rule: CompiledRule, p: P, ks: KeyState, e: OperatorEvent, host: OperatorHost): void;
  /**
   * A timer the operator scheduled is due: the watermark reached `time`. With `emit` false the
   * rule is paused, and what comes due is dropped without alerts.
   */
  onTimer(
    rule: CompiledRule,
    p: P,
    ks: KeyState,
    key: string,
    time: number,
    host: OperatorHost,
    emit: boolean,
  ): void;
  /** True when the key state holds nothing worth keeping. */
  idle(ks: KeyState): boolean;
}

export interface AlertDraft {
  readonly key: string;
  readonly ts: number;
  readonly events: readonly EventRef[];
  readonly values: Readonly<Record<string, unknown>>;
  readonly idParts: string;
  /** Fields for the title template. */
  readonly fields: Readonly<Record<string, unknown>>;
}

/**
 * Holds a key's pending entries (absence triggers, sequence partial matches; oldest first) to
 * `maxPendingPerKey`: drops the oldest beyond it and reports them as an overflow.
 */
export function capPending(
  rule: CompiledRule,
  pending: unknown[],
  key: string,
  host: OperatorHost,
): void {
  const max = host.limits.maxPendingPerKey;
  if (pending.length <= max) return;
  const drop = pending.length - max;
  pending.splice(0, drop);
  host.overflow(rule, key, drop, 'maxPendingPerKey');
}

/** The fields a rule's title reads, copied from an event so a timer can render the alert later. */
export function titleFields(
  rule: CompiledRule,
  event: Readonly<Record<string, unknown>>,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of rule.titleFields) {
    if (Object.hasOwn(event, f)) {
      const v = event[f];
      if (v === null || typeof v !== 'object')
        Object.defineProperty(out, f, {
          value: v,
          enumerable: true,
          writable: true,
          configurable: true,
        });
    }
  }
  return out;
}
