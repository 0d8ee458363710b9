/**
 * The partition of a key, computed as nats-server's `partition(P, 1)` mapping does: FNV-1a 32-bit
 * of the key's bytes, modulo P (DESIGN §3). Used to check that an event sits in its key's
 * partition, and by producers and tests that cannot use the server's mapping.
 */
export function partitionOf(key: string, partitions: number): number {
  let h = 0x811c9dc5;
  const bytes = new TextEncoder().encode(key);
  for (const b of bytes) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h % partitions;
}
