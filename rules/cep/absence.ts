import type { CompiledAbsence, CompiledRule } from '../compile-rule.js';
import type { EventRef } from '../types.js';
import { capPending, opState, titleFields } from './host.js';
import type { KeyState, OperatorHost, PatternOperator } from './host.js';

/** A trigger waiting for its expected event: it fires at `deadline` unless one arrives before. */
export interface Pending {
  deadline: number;
  ref: EventRef;
  f: Record<string, unknown>;
}

export interface AbsenceState {
  k: 'a';
  /** Pending triggers in deadline order (triggers arrive in event-time order). */
  p: Pending[];
  /** Time of the one timer this key has pending, if any: the first deadline. */
  tm: number | undefined;
}

const newState = (): AbsenceState => ({ k: 'a', p: [], tm: undefined });
const state = (ks: KeyState): AbsenceState => opState(ks, 'a', newState);

/** Keeps exactly one timer per key, at the first pending deadline. */
function schedule(rule: CompiledRule, s: AbsenceState, key: string, host: OperatorHost): void {
  const first = s.p[0];
  if (first === undefined || s.tm === first.deadline) return;
  s.tm = first.deadline;
  host.schedule(first.deadline, rule, key);
}

/**
 * Absence: a trigger fires an alert unless an expected event arrives within `withinMs`. An expected
 * event cancels every pending trigger whose deadline is still ahead of it (`[A.ts, A.ts + within)`:
 * one at exactly the deadline is too late). A trigger then starts its own wait; an event that is
 * both first cancels, then waits. The deadline timer is driven by the watermark alone.
 */
export const absence: PatternOperator<CompiledAbsence> = {
  onEvent(rule, p, ks, e, host) {
    const s = state(ks);
    const ts = e.ref.ts;
    if (e.expected && s.p.length > 0) s.p = s.p.filter((x) => x.deadline <= ts);
    if (e.trigger) {
      s.p.push({ deadline: ts + p.withinMs, ref: e.ref, f: titleFields(rule, e.event) });
      capPending(rule, s.p, e.key, host);
    }
    schedule(rule, s, e.key, host);
  },

  onTimer(rule, p, ks, key, time, host, emit) {
    const s = ks.op as AbsenceState | undefined;
    if (s?.k !== 'a' || s.tm !== time) return;
    s.tm = undefined;
    while (s.p.length > 0 && (s.p[0] as Pending).deadline <= time) {
      const due = s.p.shift() as Pending;
      if (!emit) continue;
      host.alert(rule, ks, {
        key,
        ts: due.deadline,
        events: [due.ref],
        values: { withinMs: p.withinMs, expected: [...p.expectTypes] },
        idParts: `a|${due.ref.seq}`,
        fields: due.f,
      });
    }
    schedule(rule, s, key, host);
  },

  idle(ks) {
    const s = ks.op as AbsenceState | undefined;
    return s === undefined || s.p.length === 0;
  },
};
