import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { partitionKeyFields, partitionOf } from '../../protocol/index.js';

/** FNV-1a 32-bit over the UTF-8 bytes, written plainly: the mapping nats-server applies. */
function reference(key: string, partitions: number): number {
  let h = 0x811c9dc5;
  for (const b of new TextEncoder().encode(key)) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h % partitions;
}

describe('partitionOf', () => {
  it('is FNV-1a 32-bit of the key modulo P', () => {
    // Published FNV-1a test vectors; modulo 2^32 - 1 leaves them unchanged.
    expect(partitionOf('a', 0xffffffff)).toBe(0xe40c292c);
    expect(partitionOf('foobar', 0xffffffff)).toBe(0xbf9cf968);
    expect(partitionOf('', 0xffffffff)).toBe(0x811c9dc5);
  });

  it('gives the UTF-8 answer for every key, ASCII or not', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string(), fc.string({ unit: 'grapheme' }), fc.string({ unit: 'binary' })),
        fc.integer({ min: 1, max: 1024 }),
        (key, p) => partitionOf(key, p) === reference(key, p),
      ),
      { numRuns: 2000 },
    );
  });
});

describe('partitionKeyFields', () => {
  it('reads the partition key setting: fields separated by commas, blanks around them dropped', () => {
    expect(partitionKeyFields('')).toEqual([]);
    expect(partitionKeyFields('  ')).toEqual([]);
    expect(partitionKeyFields('payer')).toEqual(['payer']);
    expect(partitionKeyFields('payer, bank')).toEqual(['payer', 'bank']);
  });
});
