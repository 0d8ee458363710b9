const encoder = new TextEncoder();

/**
 * The partition of a key, computed as nats-server's `partition(P, 1)` mapping does: FNV-1a 32-bit
 * of the key's bytes, modulo P. Used to check that an event sits in its key's
 * partition (once per event), and by producers and tests that cannot use the server's mapping.
 */
export function partitionOf(key: string, partitions: number): number {
  let h = 0x811c9dc5;
  // Keys are nearly always ASCII, whose UTF-8 bytes are its char codes: no encoding, no allocation.
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c >= 0x80) return fnv1a(encoder.encode(key)) % partitions;
    h = Math.imul(h ^ c, 0x01000193) >>> 0;
  }
  return h % partitions;
}

function fnv1a(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h;
}

/**
 * The fields of a `partitionKey` setting (`"payer"`, `"payer,bank"`): the event field(s) producers
 * partition by. Empty for none.
 */
export function partitionKeyFields(setting: string): string[] {
  return setting.trim() === '' ? [] : setting.split(',').map((f) => f.trim());
}
