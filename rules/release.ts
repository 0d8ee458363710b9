/**
 * Event time moving on: buffered events released in (time, position) order with the timers due
 * before each, keyed state expired, and rule sets brought into force (at an epoch marker, or
 * downstream at the point of event time a change takes force).
 */
import { absence } from './cep/absence.js';
import type { OperatorEvent, OperatorHost } from './cep/host.js';
import { sequence } from './cep/sequence.js';
import { threshold } from './cep/threshold.js';
import type { CompiledRule } from './compile-rule.js';
import type { RuleSet } from './rule-set.js';
import type { EventRef } from './types.js';
import { EXPECTED, TRIGGER } from './verdict.js';
import type { PartitionState, ProcessResult } from './partition-state.js';
import { hitCache, keyOfState, loadState, fillView, saveState } from './keyed-access.js';
import type { Host } from './partition-host.js';
import { expireKeys } from './key-expiry.js';
import { countHits, untag, lineageRule, collectLineages } from './lineage-use.js';

/** Releases buffered events up to the watermark in (ts, seq) order, firing due timers first. */
export function release(st: PartitionState, h: Host): void {
  for (let b = st.buffer.peek(); b !== undefined && b.ts <= st.watermark; b = st.buffer.peek()) {
    st.buffer.pop();
    // Timers strictly before the event fire first: an event exactly at a deadline is too late to cancel it.
    catchUp(st, b.ts - 1, h);
    st.down?.noteReleased(b.ruleSet, st.ruleSet);
    const ref: EventRef = Object.freeze(
      b.id === undefined ? { seq: b.seq, ts: b.ts } : { seq: b.seq, id: b.id, ts: b.ts },
    );
    // One operator event for all of this event's hits: operators read it and keep none of it
    // (they keep `ref` and `event`), and an event of a busy type meets dozens of rules.
    const e: Mutable<OperatorEvent> = {
      event: b.event,
      ref,
      key: '',
      models: b.ruleSet.models,
      hostile: b.hostile,
      trigger: false,
      expected: false,
    };
    const hits = b.hits;
    try {
      for (let i = 0; i < hits.length; i++) {
        const key = hits.keyAt(i);
        applyHit(st, e, hits.rules[i] as CompiledRule, key, hits.bitsAt(i), h);
        if (key !== hitCache.key) {
          hitCache.no = st.states.keyNumber(key);
          hitCache.key = hitCache.no < 0 ? undefined : key;
        }
      }
    } finally {
      // The cache is this event's only: another partition may hold the same key.
      hitCache.key = undefined;
      hitCache.no = -1;
    }
    untag(st, b);
  }
  catchUp(st, st.watermark, h);
}

/**
 * Fires the timers and expires the keys due up to `upTo`. Downstream, the changes that take
 * force by then are applied at their point of event time, after the timers due there.
 */
export function catchUp(st: PartitionState, upTo: number, h: Host): void {
  const d = st.down;
  if (d !== undefined)
    for (let c = d.ready[0]; c !== undefined && c.end <= upTo; c = d.ready[0]) {
      fireTimers(st, c.end, h);
      expireKeys(st, c.end);
      d.ready.shift();
      applyRuleSet(st, c.ruleSet, h.out);
    }
  fireTimers(st, upTo, h);
  expireKeys(st, upTo);
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

export function applyHit(
  st: PartitionState,
  e: Mutable<OperatorEvent>,
  rule: CompiledRule,
  key: string,
  bits: number,
  h: OperatorHost,
): void {
  const ks = loadState(st, rule, key);
  const trigger = (bits & TRIGGER) !== 0;
  e.key = key;
  e.trigger = trigger;
  e.expected = (bits & EXPECTED) !== 0;
  const p = rule.pattern;
  if (p?.kind === 'threshold') {
    if (trigger) threshold.onEvent(rule, p, ks, e, h);
  } else if (p?.kind === 'sequence') {
    if (trigger) sequence.onEvent(rule, p, ks, e, h);
  } else if (p?.kind === 'absence') absence.onEvent(rule, p, ks, e, h);
  else if (p === undefined && trigger)
    // Downstream only: a rule with no pattern keyed to this key space alerts in event-time order.
    h.alert(rule, ks, {
      key,
      ts: e.ref.ts,
      events: [e.ref],
      values: {},
      idParts: `e|${e.ref.seq}`,
      fields: e.event,
    });
  saveState(st, rule, key, ks);
}

export function fireTimers(st: PartitionState, upTo: number, h: OperatorHost): void {
  for (let t = st.timers.peek(); t !== undefined && t.time <= upTo; t = st.timers.peek()) {
    st.timers.pop();
    const rule = lineageRule(st, t.ruleId, t.epoch);
    // A deleted or reset lineage has no state left; a paused rule's due state is dropped without alerts.
    if (rule === undefined) continue;
    const k = keyOfState(st, t.key);
    const slot = k < 0 ? -1 : st.states.find(k, rule.lin);
    if (slot < 0) continue;
    st.dirty.add(t.key);
    const ks = fillView(st, k, slot);
    const p = rule.pattern;
    const emit = !rule.paused;
    if (p?.kind === 'threshold') threshold.onTimer(rule, p, ks, t.key, t.time, h, emit);
    else if (p?.kind === 'sequence') sequence.onTimer(rule, p, ks, t.key, t.time, h, emit);
    else if (p?.kind === 'absence') absence.onTimer(rule, p, ks, t.key, t.time, h, emit);
    saveState(st, rule, t.key, ks);
  }
}

/** Puts a rule set in force, dropping the lineages nothing uses any more. */
export function applyRuleSet(st: PartitionState, ruleSet: RuleSet, out: ProcessResult): void {
  // A marker for a control sequence already in force (a duplicate, or one written twice during a handoff) changes nothing.
  if (ruleSet.controlSeq <= st.ruleSet.controlSeq) return;
  const previous = st.ruleSet;
  st.ruleSet = ruleSet;
  out.applied = ruleSet.controlSeq;
  // Downstream, lineages live by the rule sets in force and released (see `lineageRules`), not by buffered events.
  if (st.down !== undefined) st.down.forgetUpTo(ruleSet.controlSeq);
  // The events judged under the rule set that was current now hold their lineages by count.
  else if (st.tags.has(previous))
    for (const b of st.buffer.unordered()) if (b.ruleSet === previous) countHits(st, b);
  collectLineages(st, previous);
}
