/**
 * Which rule versions and rule sets use a state lineage (`ruleId@epoch`): buffered events judged
 * under older rule sets hold theirs; downstream of a re-keying hop, the newer rule sets that
 * released events were judged under. A lineage nothing uses is dropped.
 */
import type { CompiledRule } from './compile-rule.js';
import type { RuleSet } from './rule-set.js';
import type { PartitionState, Buffered } from './partition-state.js';
import type { ParseEventResult } from './event.js';
import type { Hits } from './verdict.js';
import { dropLineage } from './keyed-access.js';
import type { SourceHop } from './source-hop.js';

/** Counts a buffered event's rule set as in use, and its lineages when that is not the current rule set (see `hitCounts`). */
export function tag(st: PartitionState, b: Buffered): void {
  st.tags.set(b.ruleSet, (st.tags.get(b.ruleSet) ?? 0) + 1);
  if (b.ruleSet !== st.ruleSet && st.down === undefined) countHits(st, b);
}

/** Adds a buffered event's hits to `hitCounts`. */
export function countHits(st: PartitionState, b: Buffered): void {
  const rules = b.hits.rules;
  for (let i = 0; i < rules.length; i++) {
    const sid = (rules[i] as CompiledRule).sid;
    st.hitCounts.set(sid, (st.hitCounts.get(sid) ?? 0) + 1);
  }
}

/** Releases a buffered event's hold on its rule set and lineages; drops lineages nothing uses any more. */
export function untag(st: PartitionState, b: Buffered): void {
  const left = (st.tags.get(b.ruleSet) ?? 1) - 1;
  if (left > 0) st.tags.set(b.ruleSet, left);
  else st.tags.delete(b.ruleSet);
  if (b.ruleSet === st.ruleSet || st.down !== undefined) return;
  for (const rule of b.hits.rules) {
    const sid = rule.sid;
    const n = (st.hitCounts.get(sid) ?? 1) - 1;
    if (n > 0) st.hitCounts.set(sid, n);
    else {
      st.hitCounts.delete(sid);
      if (!st.ruleSet.stateIds.has(sid)) dropLineage(st, sid);
    }
  }
}

/**
 * The other rule sets whose versions may run a lineage: those of buffered events; downstream,
 * where events bring newer rule sets than the one in force and in any order, the newer ones that
 * released events were judged under (which depends on event time only).
 */
export function ruleSetsInPlay(st: PartitionState): Iterable<RuleSet> {
  return st.down === undefined ? st.tags.keys() : st.down.released.values();
}

/** Drops the state a source holds of the rules it sends on (see `afterHopSwitch`). */
export function dropStateSentOn(st: PartitionState, hop: SourceHop): void {
  const sids = new Set<string>();
  for (const rs of [st.ruleSet, ...ruleSetsInPlay(st)])
    for (const rule of rs.rules.values()) if (hop.sendsOn(rule)) sids.add(rule.sid);
  for (const sid of sids) dropLineage(st, sid);
}

/** Every rule version that may write to a lineage: the current rule set's, and those of other rule sets in play. */
export function lineageRules(st: PartitionState, ruleId: string, epoch: number): CompiledRule[] {
  const out: CompiledRule[] = [];
  const cur = st.ruleSet.rules.get(ruleId);
  if (cur?.stateEpoch === epoch) out.push(cur);
  for (const rs of ruleSetsInPlay(st)) {
    const r = rs.rules.get(ruleId);
    if (r?.stateEpoch === epoch && !out.includes(r)) out.push(r);
  }
  return out;
}

/** The newest rule version that writes to a lineage: the current rule set first (downstream: last), then the others in play. */
export function lineageRule(
  st: PartitionState,
  ruleId: string,
  epoch: number,
): CompiledRule | undefined {
  const cur = st.ruleSet.rules.get(ruleId);
  // Downstream the rule sets in play are newer than the one in force.
  if (cur?.stateEpoch === epoch && st.down === undefined) return cur;
  // The newest other rule set wins; choosing by control sequence keeps this independent of map order.
  let best: CompiledRule | undefined = cur?.stateEpoch === epoch ? cur : undefined;
  let bestSeq = -1;
  for (const rs of ruleSetsInPlay(st)) {
    const r = rs.rules.get(ruleId);
    if (r?.stateEpoch === epoch && rs.controlSeq > bestSeq) {
      best = r;
      bestSeq = rs.controlSeq;
    }
  }
  return best;
}

/**
 * Drops keyed state (and lineage numbers) of lineages that no rule set in use refers to any more
 * (deleted or reset rules). Lineages with state are always the previous rule set's or ones buffered hits wait for,
 * so those cover the restored keys not decoded yet too.
 */
export function collectLineages(st: PartitionState, previous: RuleSet): void {
  // Numbered lineages too: one whose keys all emptied holds no state but keeps its number.
  const held = new Set([...st.lineageKeys.keys(), ...st.lineageIndex.lineages()]);
  if (st.raw.size > 0) for (const sid of previous.stateIds) held.add(sid);
  for (const sid of held)
    if (!st.ruleSet.stateIds.has(sid) && !st.hitCounts.has(sid) && !releasedHold(st, sid))
      dropLineage(st, sid);
}

/** Downstream: whether a lineage belongs to a newer rule set than the one in force that released events were judged under. */
export function releasedHold(st: PartitionState, sid: string): boolean {
  const d = st.down;
  if (d === undefined) return false;
  for (const rs of d.released.values()) if (rs.stateIds.has(sid)) return true;
  return false;
}

/**
 * Puts an event in the reorder buffer with the hits it waits for, judged under `ruleSet`; `pos` is
 * the record's position in the partition's own log. Recomputing its hits at restore needs an exact
 * copy of the event: the text it was parsed from (an object payload keeps its hits instead).
 */
export function bufferEvent(
  st: PartitionState,
  parsed: Extract<ParseEventResult, { ok: true }>,
  seq: number,
  pos: number,
  key: string,
  ruleSet: RuleSet,
  hits: Hits,
): void {
  const b: Buffered = {
    ts: parsed.ts,
    seq,
    pos,
    id: parsed.id,
    key: parsed.text !== undefined ? key : undefined,
    event: parsed.event,
    text: parsed.text,
    hostile: parsed.hostile,
    ruleSet,
    hits,
  };
  st.buffer.push(b);
  tag(st, b);
}
