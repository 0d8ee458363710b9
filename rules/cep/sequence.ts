import { evalContext } from '../compile-condition.js';
import type { CompiledRule, CompiledSequence, CompiledStep } from '../compile-rule.js';
import type { EventRef } from '../types.js';
import { capPending, opState, titleFields } from './host.js';
import type { KeyState, OperatorEvent, OperatorHost, PatternOperator } from './host.js';

/**
 * A partial match: it has matched `c` events of step `i` (and every step before it). `kept`
 * holds whole events of the steps that later steps refer to (`step:<name>` facts); other steps
 * keep only their log positions.
 */
export interface PartialMatch {
  start: number;
  i: number;
  c: number;
  /** The matched events, newest first, as a list whose tails partial matches share. */
  refs: RefNode | undefined;
  kept: Record<string, unknown>;
}

/** An immutable list node: a partial match that advances adds a node instead of copying its events. */
export interface RefNode {
  readonly ref: EventRef;
  readonly prev: RefNode | undefined;
}

/** The events of a list, oldest first. */
export function refsToArray(node: RefNode | undefined): EventRef[] {
  const out: EventRef[] = [];
  for (let n = node; n !== undefined; n = n.prev) out.push(n.ref);
  return out.reverse();
}

export function refsFromArray(refs: readonly EventRef[]): RefNode | undefined {
  let node: RefNode | undefined;
  for (const ref of refs) node = { ref, prev: node };
  return node;
}

export interface SequenceState {
  k: 'q';
  pm: PartialMatch[];
  /** Time of the pending clean-up timer, if any. */
  gc: number | undefined;
}

const newState = (): SequenceState => ({ k: 'q', pm: [], gc: undefined });
const state = (ks: KeyState): SequenceState => opState(ks, 'q', newState);

function stepMatches(
  rule: CompiledRule,
  step: CompiledStep,
  e: OperatorEvent,
  kept: Record<string, unknown>,
  host: OperatorHost,
): boolean {
  if (step.types !== undefined && !step.types.has(e.event.type as string)) return false;
  if (step.when === undefined) return true;
  const ctx = evalContext(e.event, e.models, e.hostile);
  ctx.steps = kept;
  try {
    return step.when(ctx);
  } catch (err) {
    host.error(rule, e, `step "${step.name}" failed: ${(err as Error).message}`, err);
    return false;
  }
}

/** The kept events after `step` matched `e`: a new object only when the step's event is referred to later. */
function keep(
  step: CompiledStep,
  kept: Record<string, unknown>,
  e: OperatorEvent,
): Record<string, unknown> {
  if (!step.keepEvent) return kept;
  const next = { ...kept };
  Object.defineProperty(next, step.name, {
    value: e.event,
    enumerable: true,
    writable: true,
    configurable: true,
  });
  return next;
}

function schedule(
  rule: CompiledRule,
  p: CompiledSequence,
  s: SequenceState,
  key: string,
  host: OperatorHost,
): void {
  const first = s.pm[0];
  if (first === undefined) {
    s.gc = undefined;
    return;
  }
  const at = first.start + p.withinMs;
  if (s.gc === at) return;
  s.gc = at;
  host.schedule(at, rule, key);
}

function complete(
  rule: CompiledRule,
  p: CompiledSequence,
  ks: KeyState,
  e: OperatorEvent,
  pm: PartialMatch,
  host: OperatorHost,
): void {
  const events = refsToArray(pm.refs);
  host.alert(rule, ks, {
    key: e.key,
    ts: e.ref.ts,
    events,
    values: {
      steps: p.steps.length,
      matchedEvents: events.length,
      startTs: pm.start,
      durationMs: e.ref.ts - pm.start,
    },
    idParts: `q|${events.map((r) => r.seq).join(',')}`,
    fields: titleFields(rule, e.event),
  });
}

/**
 * Sequence: steps matched in order within `withinMs`. For each event (already past the rule's `on`
 * and `when`), existing partial matches are tried oldest first; then the event may start a new
 * one. `within` is half-open: an event at exactly `start + within` no longer matches. After a
 * match, the default `skip-past-last-event` discards every other partial match of the key (they
 * all began at or before the match's last event); `no-skip` keeps them.
 */
export const sequence: PatternOperator<CompiledSequence> = {
  onEvent(rule, p, ks, e, host) {
    const s = state(ks);
    const ts = e.ref.ts;
    const last = p.steps.length - 1;
    const survivors: PartialMatch[] = [];
    const done: PartialMatch[] = [];
    for (const pm of s.pm) {
      if (ts >= pm.start + p.withinMs) continue;
      const current = p.steps[pm.i] as CompiledStep;
      const repeat = pm.c < current.times;
      const target = repeat ? current : p.steps[pm.i + 1];
      if (target === undefined) continue;
      if (stepMatches(rule, target, e, pm.kept, host)) {
        const refs: RefNode = { ref: e.ref, prev: pm.refs };
        const kept = keep(target, pm.kept, e);
        const next: PartialMatch = repeat
          ? { start: pm.start, i: pm.i, c: pm.c + 1, refs, kept }
          : { start: pm.start, i: pm.i + 1, c: 1, refs, kept };
        if (next.i === last && next.c === (p.steps[last] as CompiledStep).times) done.push(next);
        else survivors.push(next);
      } else if (!target.strict) survivors.push(pm);
    }
    const first = p.steps[0] as CompiledStep;
    if (stepMatches(rule, first, e, {}, host)) {
      const pm: PartialMatch = {
        start: ts,
        i: 0,
        c: 1,
        refs: { ref: e.ref, prev: undefined },
        kept: keep(first, {}, e),
      };
      if (last === 0 && first.times === 1) done.push(pm);
      else survivors.push(pm);
    }
    if (done.length > 0 && p.skipPastLast) {
      complete(rule, p, ks, e, done[0] as PartialMatch, host);
      s.pm = [];
    } else {
      for (const m of done) complete(rule, p, ks, e, m, host);
      s.pm = survivors; // still in start order: existing matches kept their order, a new one starts now
    }
    capPending(rule, s.pm, e.key, host);
    schedule(rule, p, s, e.key, host);
  },

  /** The clean-up timer: drops partial matches whose `within` has run out. */
  onTimer(rule, p, ks, key, time, host) {
    const s = ks.op as SequenceState | undefined;
    if (s?.k !== 'q' || s.gc !== time) return;
    s.pm = s.pm.filter((pm) => pm.start + p.withinMs > time);
    s.gc = undefined;
    schedule(rule, p, s, key, host);
  },

  idle(ks) {
    const s = ks.op as SequenceState | undefined;
    return s === undefined || s.pm.length === 0;
  },
};
