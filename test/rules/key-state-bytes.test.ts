import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ByteWriter } from '../../rules/byte-writer.js';
import { CheckpointFields } from '../../rules/checkpoint-fields.js';
import type { KeyState } from '../../rules/cep/host.js';
import type { SlidingState } from '../../rules/cep/threshold.js';
import { decodeKeyStatesText, opToJSON, writeKeyStates } from '../../rules/key-state-json.js';

const decoder = new TextDecoder();

/**
 * Format v3 of a key's checkpoint field as the string encoder wrote it before fields were
 * written as bytes: the reference the byte writer must match byte for byte, so that checkpoints
 * written before and after read the same.
 */
function referenceText(byLineage: ReadonlyMap<string, KeyState>): string {
  let base: number | undefined;
  let safe = true;
  for (const ks of byLineage.values()) {
    const s = ks.op as SlidingState | undefined;
    if (s?.k !== 's') continue;
    for (let i = s.h; i < s.t.length; i++) {
      const t = s.t[i] as number;
      base ??= t;
      if (!Number.isSafeInteger(t) || !Number.isSafeInteger(t - base)) safe = false;
    }
  }
  const b = safe ? (base ?? 0) : 0;
  const list = (a: readonly unknown[], from: number, minus: number): string | undefined => {
    let out = '[';
    for (let i = from; i < a.length; i++) {
      const x = a[i];
      if (typeof x !== 'number' || !Number.isFinite(x)) return undefined;
      out += (i === from ? '' : ',') + (x - minus);
    }
    return out + ']';
  };
  const opText = (op: unknown): string => {
    if (op === undefined) return 'null';
    const s = op as SlidingState;
    if (s.k !== 's') return JSON.stringify(opToJSON(op)) ?? 'null';
    const h = s.h;
    const t = list(s.t, h, b);
    if (t === undefined) return JSON.stringify(opToJSON(op)) ?? 'null';
    let out = '{"k":"s","t":' + t;
    if (s.sums) out += ',"sums":true';
    if (s.v.length > h) out += ',"v":' + (list(s.v, h, 0) ?? JSON.stringify(s.v.slice(h)));
    if (s.f > h) out += ',"f":' + (s.f - h);
    if (s.mn.length > 0) out += ',"mn":' + (list(s.mn, 0, h) as string);
    if (s.mx.length > 0) out += ',"mx":' + (list(s.mx, 0, h) as string);
    if (s.d !== undefined && s.d.size > 0) out += ',"d":' + JSON.stringify([...s.d]);
    return out + '}';
  };
  let out = '[' + b;
  for (const [sid, ks] of byLineage)
    out += ',["' + sid + '",' + (ks.sup ?? 'null') + ',' + opText(ks.op) + ']';
  return out + ']';
}

const oddNumber = fc.constantFrom(
  -0,
  0.1,
  1e21,
  1e-7,
  -1,
  2 ** 31,
  2 ** 31 - 1,
  2 ** 53,
  -(2 ** 53),
);
const anyNumber = fc.oneof(
  fc.integer(),
  fc.nat(2 ** 31 + 5),
  fc.double(),
  oddNumber,
  fc.constantFrom(NaN, Infinity, -Infinity),
);
const timestamp = fc.oneof(
  { weight: 8, arbitrary: fc.integer({ min: 1_700_000_000_000, max: 1_700_000_100_000 }) },
  { weight: 1, arbitrary: fc.double({ min: 1_700_000_000_000, max: 1_700_000_100_000 }) },
  { weight: 1, arbitrary: anyNumber },
);

const sliding: fc.Arbitrary<SlidingState> = fc
  .record({
    t: fc.array(timestamp, { maxLength: 6 }),
    v: fc.array(fc.oneof(anyNumber, fc.string(), fc.boolean()), { maxLength: 6 }),
    sums: fc.boolean(),
    h: fc.nat(4),
    f: fc.nat(7),
    mn: fc.array(fc.nat(9), { maxLength: 3 }),
    mx: fc.array(fc.nat(9), { maxLength: 3 }),
    d: fc.option(fc.array(fc.tuple(fc.string({ unit: 'binary' }), fc.nat(5)), { maxLength: 3 }), {
      nil: undefined,
    }),
  })
  .map((r) => ({
    k: 's' as const,
    h: Math.min(r.h, r.t.length),
    t: r.t,
    v: r.v,
    sums: r.sums,
    f: r.f,
    fs: [],
    fs0: 0,
    bs: 0,
    mn: r.mn,
    mx: r.mx,
    d: r.d === undefined ? undefined : new Map(r.d),
  }));

/** Other operators' states reach the writer as JSON text: any object with a `k` other than "s". */
const otherOp = fc.record({
  k: fc.constantFrom('x', 'absence'),
  a: fc.string({ unit: 'binary' }),
  n: anyNumber,
});

const keyStates = fc
  .uniqueArray(
    fc.tuple(
      fc.stringMatching(/^[A-Za-z0-9_-]{1,12}@[0-9]{1,3}$/),
      fc.option(fc.oneof(timestamp, fc.double()), { nil: undefined }),
      fc.oneof(
        { weight: 6, arbitrary: sliding },
        { weight: 1, arbitrary: otherOp },
        {
          weight: 1,
          arbitrary: fc.constant(undefined),
        },
      ),
    ),
    { selector: (x) => x[0], minLength: 1, maxLength: 8 },
  )
  .map((xs) => new Map(xs.map(([sid, sup, op]): [string, KeyState] => [sid, { sup, op }])));

describe('checkpoint fields written as bytes', () => {
  it('ByteWriter.number writes what String(x) does, ByteWriter.text what TextEncoder does', () => {
    const enc = new TextEncoder();
    fc.assert(
      fc.property(fc.array(fc.oneof(anyNumber, fc.string({ unit: 'binary' }))), (xs) => {
        // Small to begin with, so that most writes grow it.
        const w = new ByteWriter(1);
        let expected = '';
        for (const x of xs) {
          if (typeof x === 'number') w.number(x);
          else w.text(x);
          expected += String(x);
        }
        expect([...w.bytes()]).toEqual([...enc.encode(expected)]);
      }),
      { numRuns: 300 },
    );
  });

  it('a key field is the v3 text the string encoder wrote, byte for byte, and reads back', () => {
    fc.assert(
      fc.property(fc.array(keyStates, { minLength: 1, maxLength: 4 }), (keys) => {
        const w = new ByteWriter(8);
        const ends: number[] = [];
        for (const byLineage of keys) {
          writeKeyStates(w, byLineage);
          ends.push(w.length);
        }
        const fields = new CheckpointFields(
          keys.map((_, i) => `k${i}`),
          w.bytes(),
          ends,
        );
        keys.forEach((byLineage, i) => {
          const text = fields.text(i);
          expect(text).toBe(referenceText(byLineage));
          // JSON whenever the reference is: one with a non-finite `sup` never was.
          const finiteSups = [...byLineage.values()].every(
            (ks) => ks.sup === undefined || Number.isFinite(ks.sup),
          );
          if (finiteSups)
            expect([...decodeKeyStatesText(`k${i}`, text).keys()]).toEqual([...byLineage.keys()]);
        });
      }),
      { numRuns: 400 },
    );
  });

  it('CheckpointFields from texts: values as UTF-8 end to end, read back as the same pairs', () => {
    const pairs: [string, string][] = [
      ['a', '[1]'],
      ['ключ', 'é€😀'],
      ['', ''],
      ['b', '\ud800'],
    ];
    const f = CheckpointFields.fromTexts(pairs);
    expect(f.length).toBe(4);
    expect([...f]).toEqual([...pairs.slice(0, 3), ['b', '\ufffd']]);
    expect(f.valueBytes).toBe(3 + 2 + 3 + 4 + 0 + 3);
    expect(decoder.decode(f.value(1))).toBe('é€😀');
    expect(() => new CheckpointFields(['a'], new Uint8Array(0), [])).toThrow(RangeError);
  });
});
