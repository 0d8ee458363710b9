import type { CompiledAbsence, CompiledRule } from '../compile-rule.js';
import type { EventRef } from '../types.js';
import { titleFields, type KeyState, type OperatorEvent, type OperatorHost } from './host.js';

/** A trigger waiting for its expected event: it fires at `deadline` unless one arrives before. */
export interface Pending {
  deadline: number;
  ref: EventRef;
  f: Record<string, unknown>;
}

export interface AbsenceState {
  k: 'a';
  /** Pending triggers in deadline order. */
  p: Pending[];
}

function state(ks: KeyState): AbsenceState {
  if ((ks.op as AbsenceState | undefined)?.k !== 'a')
    ks.op = { k: 'a', p: [] } satisfies AbsenceState;
  return ks.op as AbsenceState;
}

/**
 * Feeds one event to an absence rule. An expected event cancels every pending trigger whose
 * deadline is still ahead of it (`[A.ts, A.ts + within)`: one at exactly the deadline is too
 * late). A trigger then starts its own wait; an event that is both first cancels, then waits.
 */
export function absenceEvent(
  rule: CompiledRule,
  p: CompiledAbsence,
  ks: KeyState,
  e: OperatorEvent,
  host: OperatorHost,
): void {
  const s = state(ks);
  const ts = e.ref.ts;
  if (e.expected && s.p.length > 0) s.p = s.p.filter((x) => x.deadline <= ts);
  if (!e.trigger) return;
  const deadline = ts + p.withinMs;
  s.p.push({ deadline, ref: e.ref, f: titleFields(rule, e.event) });
  host.schedule(deadline, rule, e.key);
  const max = host.limits.maxPendingPerKey;
  if (s.p.length > max) {
    const drop = s.p.length - max;
    s.p.splice(0, drop);
    host.overflow(rule, e.key, drop, 'maxPendingPerKey');
  }
}

/** The deadline timer: fires for every pending trigger due by `time`, driven by the watermark alone. */
export function absenceTimer(
  rule: CompiledRule,
  p: CompiledAbsence,
  ks: KeyState,
  key: string,
  time: number,
  host: OperatorHost,
): void {
  const s = ks.op as AbsenceState | undefined;
  if (s?.k !== 'a') return;
  while (s.p.length > 0 && (s.p[0] as Pending).deadline <= time) {
    const due = s.p.shift() as Pending;
    host.alert(rule, ks, {
      key,
      ts: due.deadline,
      events: [due.ref],
      values: { withinMs: p.withinMs, expected: [...p.expectTypes] },
      idParts: `a|${due.ref.seq}`,
      fields: due.f,
    });
  }
}

export function absenceIdle(ks: KeyState): boolean {
  const s = ks.op as AbsenceState | undefined;
  return s === undefined || s.p.length === 0;
}
