import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { classifyHop, hopPayload, rekeySubject } from '../../protocol/index.js';
import type { HopMessage } from '../../rules/index.js';

const enc = (s: string): Uint8Array => new TextEncoder().encode(s);

describe('the re-keying hop on the wire', () => {
  it('names a key space partition by one subject token each', () => {
    expect(rekeySubject('card~type', 3)).toBe('rekey.card~type.3');
  });

  it('reads back every forward and report it writes, keys and texts of any characters', () => {
    const time = fc.oneof(fc.constant(-Infinity), fc.integer({ min: -1e12, max: 1e13 }));
    const common = {
      space: fc.constant('card'),
      partition: fc.nat(15),
      origin: fc.nat(1e15),
      n: fc.integer({ min: 1, max: 1e12 }),
      controlSeq: fc.nat(1e9),
      watermark: time,
    };
    const message: fc.Arbitrary<HopMessage> = fc.oneof(
      fc.record({
        kind: fc.constant('forward' as const),
        ...common,
        srcSeq: fc.integer({ min: 1, max: 1e15 }),
        key: fc.string({ minLength: 1, unit: 'binary' }),
        ts: fc.integer({ min: 0, max: 1e13 }),
        publishTs: fc.integer({ min: 0, max: 1e13 }),
        text: fc.string({ unit: 'binary' }).map((s) => JSON.stringify({ type: 'x', s })),
      }),
      fc.record({ kind: fc.constant('report' as const), ...common, horizon: time }),
    );
    fc.assert(
      fc.property(fc.nat(1023), message, (src, m) => {
        const back = classifyHop(hopPayload(src, m));
        if (m.kind === 'forward')
          expect(back).toEqual({
            kind: 'forward',
            src,
            origin: m.origin,
            n: m.n,
            srcSeq: m.srcSeq,
            controlSeq: m.controlSeq,
            watermark: m.watermark,
            ts: m.ts,
            publishTs: m.publishTs,
            key: m.key,
            text: m.text,
          });
        else
          expect(back).toEqual({
            kind: 'report',
            src,
            origin: m.origin,
            n: m.n,
            controlSeq: m.controlSeq,
            watermark: m.watermark,
            horizon: m.horizon,
          });
      }),
    );
  });

  it('reads lines written before numberings had origins as origin 0', () => {
    expect(classifyHop(enc('R 3 7 2 100 90'))).toEqual({
      kind: 'report',
      src: 3,
      origin: 0,
      n: 7,
      controlSeq: 2,
      watermark: 100,
      horizon: 90,
    });
    expect(classifyHop(enc('F 3 7 11 2 - 50 60 2\nk1{"type":"x"}'))).toMatchObject({
      kind: 'forward',
      src: 3,
      origin: 0,
      n: 7,
      srcSeq: 11,
      watermark: -Infinity,
      key: 'k1',
      text: '{"type":"x"}',
    });
  });

  it('refuses what no source wrote, saying what a message must be', () => {
    for (const bad of [
      '{"type":"payment"}',
      'R 1 0 2 3',
      'R 1 0 2 x 4 5',
      'R 1 x 2 3 4 5',
      'F 1 0 2 3 4 5 6 7 9\nk{}',
      'F 1 0 2 3 4 5 6 7 0\nk{}',
      'F 1 0 2 3 4 5 6 7\nk{}',
      'F 1 - 2 3 4 5 6 7 1\nk{}',
      'R 1 0 2 3 4 5\nextra',
    ]) {
      const c = classifyHop(enc(bad));
      expect(c.kind, bad).toBe('dead');
      if (c.kind === 'dead') expect(c.message).toContain('rekey.>');
    }
  });
});
