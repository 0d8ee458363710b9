import { describe, expect, it } from 'vitest';
import {
  applyControl,
  createPartition,
  DEFAULT_LIMITS,
  processRecord,
  emptyRuleSet,
  lateMessage,
  parseEvent,
  validateControl,
} from '../../rules/index.js';

describe('parseEvent', () => {
  const parse = (data: unknown) => parseEvent(data, 42, DEFAULT_LIMITS);

  it('takes event time from ts (ms or ISO-8601), else the publish time', () => {
    expect(parse('{"type":"p","ts":1000}')).toMatchObject({ ok: true, ts: 1000 });
    expect(parse('{"type":"p","ts":"1970-01-01T00:00:01.500Z"}')).toMatchObject({
      ok: true,
      ts: 1500,
    });
    expect(parse('{"type":"p","id":7}')).toMatchObject({ ok: true, ts: 42, id: '7' });
  });

  it('names the reason for each bad payload', () => {
    expect(parse('{"type":')).toMatchObject({ ok: false, reason: 'not-json' });
    expect(parse('[1]')).toMatchObject({ ok: false, reason: 'not-object' });
    expect(parse('{"amount":1}')).toMatchObject({ ok: false, reason: 'missing-type' });
    expect(parse('{"type":"p","ts":"yesterday"}')).toMatchObject({ ok: false, reason: 'bad-ts' });
    expect(parse('{"type":"p","ts":1.5}')).toMatchObject({ ok: false, reason: 'bad-ts' });
    expect(parse('{"type":"p","__proto__":{"x":1}}')).toMatchObject({
      ok: false,
      reason: 'forbidden-field',
    });
    expect(parseEvent('{"type":"p"}', 0, { ...DEFAULT_LIMITS, maxEventBytes: 5 })).toMatchObject({
      ok: false,
      reason: 'too-large',
    });
  });
});

describe('messages that say what to fix', () => {
  it('a late event whose ts is in seconds is told so, instead of being told to wait longer', () => {
    const now = 1_800_000_000_000;
    expect(lateMessage(1_800_000_000, now)).toContain('looks like seconds');
    expect(lateMessage(1_800_000_000, now)).toContain('send 1800000000000');
    expect(lateMessage(now - 5000, now)).toContain('raise VIGIL_OUT_OF_ORDER_MS');
    // A small ts far from a watermark in seconds' range is not taken for seconds.
    expect(lateMessage(1000, now)).not.toContain('seconds');
  });

  it('an unknown operator comes with the nearest one, decorators kept', () => {
    const problem = (operator: string) =>
      validateControl(emptyRuleSet(), {
        op: 'upsert-rule',
        rule: { id: 'r', on: ['x'], when: { all: [{ fact: 'a', operator, value: 1 }] } },
      })[0]?.message ?? '';
    expect(problem('greaterThen')).toContain('did you mean greaterThan?');
    expect(problem('not:someFact:equl')).toContain('did you mean not:someFact:equal?');
    expect(problem('lessthan')).toContain('did you mean lessThan?');
    expect(problem('frobnicate')).not.toContain('did you mean');
  });
});

describe('a rule keyed by a field the event lacks', () => {
  it('is not met, and the result says which rule', () => {
    const rs = applyControl(
      emptyRuleSet(),
      {
        op: 'upsert-rule',
        rule: {
          id: 'by-card',
          on: ['p'],
          key: 'card',
          when: { all: [{ fact: 'type', operator: 'equal', value: 'p' }] },
        },
      },
      1,
    ).ruleSet;
    const st = createPartition(rs, { partition: 0 });
    const r = processRecord(st, {
      kind: 'event',
      seq: 1,
      key: 'k',
      publishTs: 5,
      data: '{"type":"p"}',
    });
    expect(r.keyMissing).toEqual(['by-card']);
    expect(r.alerts).toEqual([]);
    const ok = processRecord(st, {
      kind: 'event',
      seq: 2,
      key: 'k',
      publishTs: 6,
      data: '{"type":"p","card":"c1"}',
    });
    expect(ok.keyMissing).toEqual([]);
    expect(ok.alerts).toHaveLength(1);
  });
});
