import { Heap } from './cep/heap.js';

/**
 * Keyed state is checked for expiry in buckets of event time this wide: a key whose states can
 * no longer change an outcome after time E is looked at when the watermark passes E rounded up
 * to the bucket. One timer object per (key, rule) state, moved on every event, would be millions
 * of heap entries; a bucket is a list of keys, one entry per key.
 */
export const EXPIRY_BUCKET_MS = 1000;

/** The bucket in which a state that can change nothing after `end` is looked at. */
export function expiryBucket(end: number): number {
  return Math.ceil(end / EXPIRY_BUCKET_MS) * EXPIRY_BUCKET_MS;
}

let listing = true;

/** Whether states are listed for expiry (see {@link withoutExpiry}). */
export function expiryOn(): boolean {
  return listing;
}

/**
 * Runs `fn` with expiry off: no state is listed, so none is removed. For tests that check that
 * expiry changes no outcome against a run that keeps everything.
 */
export function withoutExpiry<T>(fn: () => T): T {
  const was = listing;
  listing = false;
  try {
    return fn();
  } finally {
    listing = was;
  }
}

/** Why keyed state was removed. */
export const ExpiryReason = {
  /** A sliding window whose newest entry has left the look-back. */
  window: 'window',
  /** An alert suppression time whose `suppressFor` has passed (nothing else was held). */
  suppression: 'suppression',
  /** A state its rule's `stateTtl` ended before its own end. */
  ttl: 'ttl',
} as const;
export type ExpiryReason = (typeof ExpiryReason)[keyof typeof ExpiryReason];

/**
 * The keys to look at for expiry, by bucket (see {@link EXPIRY_BUCKET_MS}). A key is listed in the
 * bucket its states record (`KeyedStates.exp`); when a state needs an earlier look the key is
 * listed again there, and the later entry goes stale (it no longer matches the key's bucket and
 * is skipped). Deterministic: buckets come out in time order, keys in the order they were listed.
 */
export class ExpiryQueue {
  private readonly buckets = new Map<number, string[]>();
  private readonly times = new Heap<number>((a, b) => a < b);

  /** Buckets still to come. */
  get size(): number {
    return this.times.size;
  }

  add(key: string, bucket: number): void {
    const keys = this.buckets.get(bucket);
    if (keys !== undefined) keys.push(key);
    else {
      this.buckets.set(bucket, [key]);
      this.times.push(bucket);
    }
  }

  /** The earliest bucket, if any. */
  peek(): number | undefined {
    return this.times.peek();
  }

  /** Removes the earliest bucket and returns its keys. */
  take(): string[] {
    const t = this.times.pop();
    if (t === undefined) return [];
    const keys = this.buckets.get(t) ?? [];
    this.buckets.delete(t);
    return keys;
  }
}
