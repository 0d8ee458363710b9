import { describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS, parseEvent } from '../../rules/index.js';

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
