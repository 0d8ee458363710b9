import { compileRule, incompatibility, type CompiledRule } from './compile-rule.js';
import { pointer, type Problem } from './errors.js';
import { DEFAULT_LIMITS, type RuleLimits } from './limits.js';
import { compileModel, isValidId, validateModel, type CompiledModel } from './models.js';
import { buildRuleSet, ruleSetFromJSON, type RuleSet, type RuleSetJSON } from './rule-set.js';
import { CONTROL_OPS, type ControlMessage, type Model, type Rule } from './types.js';
import type { ConditionRefs } from './validate-condition.js';
import { isObject, objectAt } from './validate-json.js';
import { validateRule } from './validate-rule.js';

/** What a control message does to one rule's keyed state. */
export interface StateChange {
  readonly ruleId: string;
  readonly action: 'created' | 'kept' | 'reset' | 'dropped' | 'paused' | 'resumed' | 'cleared';
  readonly reason?: string;
}

/** The outcome of applying one control message: accepted with its effects, or rejected with every problem. */
export type ControlOutcome =
  | {
      readonly ok: true;
      readonly ruleSet: RuleSet;
      readonly message: ControlMessage;
      readonly changes: readonly StateChange[];
    }
  | { readonly ok: false; readonly ruleSet: RuleSet; readonly problems: readonly Problem[] };

interface Working {
  readonly seq: number;
  readonly rules: Map<string, CompiledRule>;
  readonly models: Map<string, CompiledModel>;
  readonly refs: Map<string, ConditionRefs>;
  readonly changes: StateChange[];
  readonly problems: Problem[];
  readonly limits: RuleLimits;
}

const OPS: ReadonlySet<string> = new Set(CONTROL_OPS);

function upsertRule(w: Working, raw: unknown, at: string): void {
  const v = validateRule(raw, at, w.limits, w.problems);
  if (v === undefined) return;
  const before = w.rules.get(v.rule.id);
  let epoch = w.seq;
  if (before === undefined) w.changes.push({ ruleId: v.rule.id, action: 'created' });
  else {
    const why = incompatibility(before.def, v.rule);
    if (why === undefined) {
      epoch = before.stateEpoch;
      w.changes.push({ ruleId: v.rule.id, action: 'kept' });
    } else w.changes.push({ ruleId: v.rule.id, action: 'reset', reason: why });
  }
  w.rules.set(v.rule.id, compileRule(v.rule, w.seq, epoch, before?.paused ?? false));
  w.refs.set(v.rule.id, v.refs);
}

function existingRule(w: Working, id: unknown, at: string): CompiledRule | undefined {
  if (!isValidId(id)) {
    w.problems.push({
      pointer: at,
      message: 'id must be a rule id (1-128 letters, digits, "_" or "-")',
    });
    return undefined;
  }
  const r = w.rules.get(id);
  if (r === undefined)
    w.problems.push({
      pointer: at,
      message: `there is no rule "${id}"; list the rules to find its id`,
    });
  return r;
}

function applyChange(w: Working, m: Record<string, unknown>, at: string, nested: boolean): void {
  switch (m.op) {
    case 'upsert-rule':
      upsertRule(w, m.rule, pointer(at, 'rule'));
      break;
    case 'delete-rule': {
      const r = existingRule(w, m.id, pointer(at, 'id'));
      if (r === undefined) break;
      w.rules.delete(r.id);
      w.refs.delete(r.id);
      w.changes.push({ ruleId: r.id, action: 'dropped' });
      break;
    }
    case 'pause-rule':
    case 'resume-rule': {
      const r = existingRule(w, m.id, pointer(at, 'id'));
      if (r === undefined) break;
      const paused = m.op === 'pause-rule';
      w.rules.set(r.id, compileRule(r.def, r.version, r.stateEpoch, paused));
      w.changes.push({ ruleId: r.id, action: paused ? 'paused' : 'resumed' });
      break;
    }
    case 'upsert-model':
      if (validateModel(m.model, pointer(at, 'model'), w.limits, w.problems)) {
        const model = m.model as Model;
        w.models.set(model.id, compileModel(model));
      }
      break;
    case 'delete-model':
      if (!isValidId(m.id) || !w.models.has(m.id))
        w.problems.push({
          pointer: pointer(at, 'id'),
          message: `there is no model "${String(m.id)}"`,
        });
      else w.models.delete(m.id);
      break;
    case 'clear-state': {
      const targets =
        m.ruleId === undefined
          ? [...w.rules.values()]
          : [existingRule(w, m.ruleId, pointer(at, 'ruleId'))];
      for (const r of targets) {
        if (r === undefined) continue;
        w.rules.set(r.id, compileRule(r.def, r.version, w.seq, r.paused));
        w.changes.push({ ruleId: r.id, action: 'cleared' });
      }
      break;
    }
    case 'replace-all': {
      if (!Array.isArray(m.rules)) {
        w.problems.push({
          pointer: pointer(at, 'rules'),
          message: 'rules must be an array of rules (it may be empty)',
        });
        break;
      }
      if (m.models !== undefined && !Array.isArray(m.models)) {
        w.problems.push({
          pointer: pointer(at, 'models'),
          message: 'models must be an array of models',
        });
        break;
      }
      const old = new Map(w.rules);
      w.rules.clear();
      w.refs.clear();
      w.models.clear();
      const seen = new Set<string>();
      (m.models ?? []).forEach((raw: unknown, i: number) => {
        if (!validateModel(raw, pointer(at, 'models', i), w.limits, w.problems)) return;
        const model = raw as Model;
        if (w.models.has(model.id))
          w.problems.push({
            pointer: pointer(at, 'models', i, 'id'),
            message: `model "${model.id}" is listed twice`,
          });
        w.models.set(model.id, compileModel(model));
      });
      m.rules.forEach((raw: unknown, i: number) => {
        const v = validateRule(raw, pointer(at, 'rules', i), w.limits, w.problems);
        if (v === undefined) return;
        if (seen.has(v.rule.id))
          w.problems.push({
            pointer: pointer(at, 'rules', i, 'id'),
            message: `rule "${v.rule.id}" is listed twice`,
          });
        seen.add(v.rule.id);
        const before = old.get(v.rule.id);
        const why = before === undefined ? undefined : incompatibility(before.def, v.rule);
        const keep = before !== undefined && why === undefined;
        w.rules.set(v.rule.id, compileRule(v.rule, w.seq, keep ? before.stateEpoch : w.seq, false));
        w.refs.set(v.rule.id, v.refs);
        w.changes.push(
          before === undefined
            ? { ruleId: v.rule.id, action: 'created' }
            : keep
              ? { ruleId: v.rule.id, action: 'kept' }
              : { ruleId: v.rule.id, action: 'reset', reason: why as string },
        );
      });
      for (const id of old.keys())
        if (!seen.has(id)) w.changes.push({ ruleId: id, action: 'dropped' });
      break;
    }
    case 'changeset':
      if (nested) {
        w.problems.push({
          pointer: pointer(at, 'op'),
          message: 'a changeset cannot contain another changeset; list its changes directly',
        });
        break;
      }
      if (!Array.isArray(m.changes) || m.changes.length === 0) {
        w.problems.push({
          pointer: pointer(at, 'changes'),
          message: 'changes must be a non-empty array of control messages',
        });
        break;
      }
      m.changes.forEach((c: unknown, i: number) =>
        applyMessage(w, c, pointer(at, 'changes', i), true),
      );
      break;
  }
}

function applyMessage(w: Working, raw: unknown, at: string, nested: boolean): void {
  if (!objectAt(raw, at, 'a control message must be a JSON object with an "op"', w.problems))
    return;
  if (typeof raw.op !== 'string' || !OPS.has(raw.op)) {
    w.problems.push({
      pointer: pointer(at, 'op'),
      message: `op must be one of ${[...OPS].join(', ')}, got ${JSON.stringify(raw.op)}`,
    });
    return;
  }
  if (raw.meta !== undefined) {
    if (!isObject(raw.meta))
      w.problems.push({
        pointer: pointer(at, 'meta'),
        message: 'meta must be an object {"actor", "reason", "requestId"}',
      });
    else
      for (const k of ['actor', 'reason', 'requestId']) {
        if (raw.meta[k] !== undefined && typeof raw.meta[k] !== 'string')
          w.problems.push({
            pointer: pointer(at, 'meta', k),
            message: `meta.${k} must be a string`,
          });
      }
  }
  applyChange(w, raw, at, nested);
}

/** Checks what can only be judged on the whole resulting rule set: references and counts. */
function checkFinalState(w: Working): void {
  if (w.rules.size > w.limits.maxRules)
    w.problems.push({
      pointer: '',
      message: `the rule set would hold ${w.rules.size} rules, over the limit of ${w.limits.maxRules}`,
    });
  if (w.models.size > w.limits.maxModels)
    w.problems.push({
      pointer: '',
      message: `the rule set would hold ${w.models.size} models, over the limit of ${w.limits.maxModels}`,
    });
  for (const [ruleId, refs] of [...w.refs].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
    for (const id of refs.models) {
      const m = w.models.get(id);
      if (m?.kind !== 'scorer')
        w.problems.push({
          pointer: '',
          message: `rule "${ruleId}" uses "model:${id}", but ${m ? `"${id}" is a lookup table (use "list:${id}")` : `there is no model "${id}"`}; publish the model first or in the same changeset`,
        });
    }
    for (const id of refs.lists) {
      const m = w.models.get(id);
      if (m === undefined || m.kind === 'scorer')
        w.problems.push({
          pointer: '',
          message: `rule "${ruleId}" uses "list:${id}", but ${m ? `"${id}" is a scorer (use "model:${id}")` : `there is no lookup table "${id}"`}; publish it first or in the same changeset`,
        });
    }
  }
}

/**
 * Applies one control message, received at `CONTROL` sequence `controlSeq`, to a rule set. Pure
 * and deterministic: every shard gets the same outcome from the same inputs, so every shard
 * accepts or rejects a message identically. A rejected message leaves the rules unchanged but
 * still advances `controlSeq`, since it was considered at that position of the total order.
 */
export function applyControl(
  ruleSet: RuleSet,
  message: unknown,
  controlSeq: number,
  limits: RuleLimits = DEFAULT_LIMITS,
): ControlOutcome {
  if (!Number.isSafeInteger(controlSeq) || controlSeq <= ruleSet.controlSeq) {
    throw new RangeError(
      `control sequence ${controlSeq} must be greater than the rule set's ${ruleSet.controlSeq}`,
    );
  }
  const w: Working = {
    seq: controlSeq,
    rules: new Map(ruleSet.rules),
    models: new Map(ruleSet.models),
    refs: new Map(ruleSet.refs),
    changes: [],
    problems: [],
    limits,
  };
  // Rules keep parts of the message; a private copy keeps the caller from changing them afterwards.
  // A JSON copy, not structuredClone: V8 evaluates closures over structuredClone'd arrays about 2x slower.
  let copy: unknown;
  try {
    copy = JSON.parse(JSON.stringify(message)) as unknown;
  } catch {
    w.problems.push({ pointer: '', message: 'a control message must be plain JSON data' });
  }
  if (w.problems.length === 0) applyMessage(w, copy, '', false);
  if (w.problems.length === 0) checkFinalState(w);
  if (w.problems.length > 0) {
    return {
      ok: false,
      ruleSet: buildRuleSet(controlSeq, ruleSet.rules, ruleSet.models, ruleSet.refs),
      problems: w.problems,
    };
  }
  return {
    ok: true,
    ruleSet: buildRuleSet(controlSeq, w.rules, w.models, w.refs),
    message: copy as ControlMessage,
    changes: w.changes,
  };
}

/** The same rules at a later control sequence: for a message that could not even be parsed. */
export function skipControl(ruleSet: RuleSet, controlSeq: number): RuleSet {
  if (!Number.isSafeInteger(controlSeq) || controlSeq <= ruleSet.controlSeq) {
    throw new RangeError(
      `control sequence ${controlSeq} must be greater than the rule set's ${ruleSet.controlSeq}`,
    );
  }
  return buildRuleSet(controlSeq, ruleSet.rules, ruleSet.models, ruleSet.refs);
}

/** Validates a control message against a rule set without applying it (what the control plane calls before publishing). */
export function validateControl(
  ruleSet: RuleSet,
  message: unknown,
  limits: RuleLimits = DEFAULT_LIMITS,
): readonly Problem[] {
  const outcome = applyControl(ruleSet, message, ruleSet.controlSeq + 1, limits);
  return outcome.ok ? [] : outcome.problems;
}

/** Parses control-message bytes or text; a parse failure is reported as a problem, like any other. */
export function parseControl(
  data: string | Uint8Array,
  limits: RuleLimits = DEFAULT_LIMITS,
): { ok: true; message: unknown } | { ok: false; problems: Problem[] } {
  const size = typeof data === 'string' ? Buffer.byteLength(data) : data.byteLength;
  const max = limits.maxControlBytes;
  if (size > max)
    return {
      ok: false,
      problems: [
        {
          pointer: '',
          message: `control message is ${size} bytes, over the limit of ${max}; split it or shrink its lookup tables`,
        },
      ],
    };
  try {
    return {
      ok: true,
      message: JSON.parse(typeof data === 'string' ? data : new TextDecoder().decode(data)),
    };
  } catch (e) {
    return {
      ok: false,
      problems: [
        {
          pointer: '',
          message: `control message is not JSON (${(e as Error).message}); publish one JSON object`,
        },
      ],
    };
  }
}

/** Restores a stored rule set (see `ruleSetToJSON`), recomputing each rule's references. */
export function restoreRuleSet(json: RuleSetJSON, limits: RuleLimits = DEFAULT_LIMITS): RuleSet {
  return ruleSetFromJSON(json, (rule: Rule) => {
    const v = validateRule(rule, '', limits, []);
    if (v === undefined) throw new Error(`stored rule "${rule.id}" no longer validates`);
    return v.refs;
  });
}
