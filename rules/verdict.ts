import { keyValue } from './rule-key.js';
import { evalContext, type EvalContext } from './compile-condition.js';
import type { CompiledRule } from './compile-rule.js';
import type { RuleSet } from './rule-set.js';

/** The event passed the rule's `on` and `when`. */
export const TRIGGER = 1;
/** Absence rules: the event is one the rule expects (`expect.on` and `expect.when`). */
export const EXPECTED = 2;

/** The key a rule judges an event under: its `key` fields' value, or the record's key; undefined when a field cannot be a key. */
export function keyOf(
  rule: CompiledRule,
  event: Readonly<Record<string, unknown>>,
  recordKey: string,
): string | undefined {
  return rule.keyFields === undefined ? recordKey : keyValue(rule.keyFields, event);
}

/** One event's evaluation context, made when the first rule needs it and shared by the others. */
export class LazyContext {
  private ctx: EvalContext | undefined;
  constructor(
    private readonly event: Readonly<Record<string, unknown>>,
    private readonly rs: RuleSet,
    private readonly hostile: boolean,
  ) {}

  get(): EvalContext {
    return (this.ctx ??= evalContext(this.event, this.rs.models, this.hostile));
  }
}

/**
 * What a rule makes of an event of `type`: {@link TRIGGER} and {@link EXPECTED} bits, 0 for
 * neither. Throws what the rule's conditions throw. A pure function of the rule, the event and
 * the rule set's models: a restored partition recomputes it for its buffered events.
 */
export function ruleVerdict(rule: CompiledRule, type: string, lc: LazyContext): number {
  let trigger = rule.triggeredByIndex || rule.types === undefined || rule.types.has(type);
  if (trigger && rule.when !== undefined) trigger = rule.when(lc.get());
  let expected = false;
  const p = rule.pattern;
  if (p?.kind === 'absence' && (p.expectAny || p.expectTypes.has(type)))
    expected = p.expectWhen === undefined || p.expectWhen(lc.get());
  return (trigger ? TRIGGER : 0) | (expected ? EXPECTED : 0);
}

/** A rule a buffered event must still meet, decided at arrival under the rule set then in force. */
export interface Hit {
  readonly rule: CompiledRule;
  readonly key: string;
  readonly trigger: boolean;
  readonly expected: boolean;
}

/**
 * The rules a buffered event must still meet, in rule order, with the key each judges it under
 * and its {@link TRIGGER}/{@link EXPECTED} bits. An event of a busy type waits in the reorder
 * buffer for dozens of rules, nearly always under its record's key and as a trigger only: the
 * list then is one array of rules, where an object per hit was most of what a buffered event
 * held. Keys and bits get arrays of their own only once a hit differs.
 */
export class Hits {
  /** Replaced only by {@link trim}. */
  rules: CompiledRule[] = [];
  private keys: string[] | undefined;
  private bits: number[] | undefined;

  /** @param key0 the key hits are judged under unless {@link add} says otherwise */
  constructor(private readonly key0: string) {}

  get length(): number {
    return this.rules.length;
  }

  add(rule: CompiledRule, key: string, bits: number): void {
    const n = this.rules.length;
    this.rules.push(rule);
    if (this.keys === undefined && key !== this.key0)
      this.keys = new Array<string>(n).fill(this.key0);
    this.keys?.push(key);
    if (this.bits === undefined && bits !== TRIGGER) this.bits = new Array<number>(n).fill(TRIGGER);
    this.bits?.push(bits);
  }

  /**
   * Gives the lists arrays of their own length once no more hits come: an array grown by `push`
   * keeps up to 16 spare slots, more than the ten or so hits of a busy type, and a buffered event
   * holds its list for as long as it waits in the reorder buffer.
   */
  trim(): void {
    this.rules = this.rules.slice();
    if (this.keys !== undefined) this.keys = this.keys.slice();
    if (this.bits !== undefined) this.bits = this.bits.slice();
  }

  keyAt(i: number): string {
    return this.keys === undefined ? this.key0 : (this.keys[i] as string);
  }

  bitsAt(i: number): number {
    return this.bits === undefined ? TRIGGER : (this.bits[i] as number);
  }

  /** The hits as objects (snapshots, tests; not the hot path). */
  toArray(): Hit[] {
    return this.rules.map((rule, i) => {
      const bits = this.bitsAt(i);
      return {
        rule,
        key: this.keyAt(i),
        trigger: (bits & TRIGGER) !== 0,
        expected: (bits & EXPECTED) !== 0,
      };
    });
  }
}

/**
 * The hits an event that arrived under `rs` waits in the reorder buffer for: the same list
 * `processRecord` made at arrival (a rule that threw then throws again, and was reported then).
 * Checkpoints store buffered events without their hits, and restore recomputes them here, for the
 * rules the partition judges itself (`judges`: see `judgesHere`).
 */
export function bufferedHits(
  rs: RuleSet,
  event: Readonly<Record<string, unknown>>,
  recordKey: string,
  hostile: boolean,
  judges: (rule: CompiledRule) => boolean,
): Hits {
  const type = event.type as string;
  const lc = new LazyContext(event, rs, hostile);
  const hits = new Hits(recordKey);
  const rules = rs.rulesFor(type);
  // Rules skipped on their guards are false on the event, and could not have thrown on it.
  const skipped = hostile ? undefined : rs.guardsFor(type).skipped(event);
  for (let i = 0; i < rules.length; i++) {
    const rule = rules[i] as CompiledRule;
    if ((skipped !== undefined && skipped[i] === 1) || !judges(rule)) continue;
    const key = keyOf(rule, event, recordKey);
    if (key === undefined) continue;
    let v: number;
    try {
      v = ruleVerdict(rule, type, lc);
    } catch {
      continue;
    }
    if (v !== 0) hits.add(rule, key, v);
  }
  hits.trim();
  return hits;
}
