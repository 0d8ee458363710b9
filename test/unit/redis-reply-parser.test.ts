import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ReplyParser } from '../../service/checkpoint/redis-hash-read.js';

/** RESP2 as Redis writes it: status replies, then an array of bulk strings. */
function reply(statuses: number, items: readonly string[]): Buffer {
  let s = '+OK\r\n'.repeat(statuses) + `*${items.length}\r\n`;
  for (const x of items) s += `$${Buffer.byteLength(x)}\r\n${x}\r\n`;
  return Buffer.from(s);
}

/** Feeds `buf` cut at `cuts` (sorted offsets); returns what the parser returned, and when. */
function feed(
  p: ReplyParser,
  buf: Buffer,
  cuts: readonly number[],
): { out: string[] | undefined; at: number } {
  const bounds = [...new Set([0, ...cuts.filter((c) => c > 0 && c < buf.length), buf.length])].sort(
    (a, b) => a - b,
  );
  for (let k = 1; k < bounds.length; k++) {
    const out = p.push(buf.subarray(bounds[k - 1], bounds[k]));
    if (out !== undefined) return { out, at: k };
  }
  return { out: undefined, at: -1 };
}

describe('ReplyParser (the restore read of a checkpoint hash)', () => {
  it('reads the array whatever the chunks, after the status replies', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 }),
        fc.array(fc.string({ unit: 'grapheme', maxLength: 40 }), { maxLength: 40 }),
        fc.array(fc.nat(), { maxLength: 12 }),
        (statuses, items, rawCuts) => {
          const buf = reply(statuses, items);
          const cuts = rawCuts.map((c) => c % (buf.length + 1));
          const got = feed(new ReplyParser(statuses), buf, cuts);
          expect(got.out).toEqual(items);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('returns nothing until the last byte has come', () => {
    const buf = reply(0, ['k1', 'v1', 'k2', 'v2']);
    const p = new ReplyParser(0);
    expect(p.push(buf.subarray(0, buf.length - 1))).toBeUndefined();
    expect(p.push(buf.subarray(buf.length - 1))).toEqual(['k1', 'v1', 'k2', 'v2']);
  });

  it('turns an error reply into an error, also one to AUTH', () => {
    expect(() =>
      new ReplyParser(0).push(Buffer.from('-WRONGTYPE Operation against a key\r\n')),
    ).toThrow(/WRONGTYPE/);
    expect(() => new ReplyParser(1).push(Buffer.from('-WRONGPASS invalid password\r\n'))).toThrow(
      /WRONGPASS/,
    );
  });

  it('says an error reply is worth retrying only while the server is not ready', () => {
    const thrown = (reply: string): { retryable?: boolean } => {
      try {
        new ReplyParser(0).push(Buffer.from(reply));
      } catch (e) {
        return e as { retryable?: boolean };
      }
      throw new Error('no error');
    };
    expect(thrown('-LOADING Redis is loading the dataset in memory\r\n').retryable).toBe(true);
    expect(thrown('-BUSY Redis is busy running a script\r\n').retryable).toBe(true);
    expect(thrown('-WRONGTYPE Operation against a key\r\n').retryable).toBe(false);
    expect(thrown('-ERR unknown command\r\n').retryable).toBe(false);
  });

  it('reads an empty hash', () => {
    expect(new ReplyParser(0).push(Buffer.from('*0\r\n'))).toEqual([]);
  });
});
