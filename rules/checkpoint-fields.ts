import { ByteWriter } from './byte-writer.js';

const decoder = new TextDecoder();

/**
 * The keyed-state fields a checkpoint writes: field names (keys) and their values, the values as
 * UTF-8 bytes end to end in one buffer, so that a store can hand them to its connection as they
 * are (see {@link ByteWriter} for why not strings). Iterates as `[field, text]` pairs.
 */
export class CheckpointFields implements Iterable<[string, string]> {
  /**
   * @param keys the field names, in order
   * @param bytes the values end to end
   * @param ends where each value ends in `bytes` (value i starts where value i − 1 ends)
   */
  constructor(
    readonly keys: readonly string[],
    readonly bytes: Uint8Array,
    readonly ends: readonly number[],
  ) {
    if (ends.length !== keys.length)
      throw new RangeError(`${keys.length} fields but ${ends.length} value ends`);
  }

  /** Fields from their texts. */
  static fromTexts(pairs: Iterable<readonly [string, string]>): CheckpointFields {
    const w = new ByteWriter();
    const keys: string[] = [];
    const ends: number[] = [];
    for (const [k, v] of pairs) {
      keys.push(k);
      w.text(v);
      ends.push(w.length);
    }
    return new CheckpointFields(keys, w.bytes(), ends);
  }

  /** How many fields. */
  get length(): number {
    return this.keys.length;
  }

  /** The values' bytes in all. */
  get valueBytes(): number {
    return this.ends.length === 0 ? 0 : (this.ends[this.ends.length - 1] as number);
  }

  /** Value i's bytes (a view into {@link bytes}). */
  value(i: number): Uint8Array {
    return this.bytes.subarray(i === 0 ? 0 : this.ends[i - 1], this.ends[i]);
  }

  /** Value i as text. */
  text(i: number): string {
    return decoder.decode(this.value(i));
  }

  *[Symbol.iterator](): Iterator<[string, string]> {
    for (let i = 0; i < this.keys.length; i++) yield [this.keys[i] as string, this.text(i)];
  }
}
