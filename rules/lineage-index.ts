import { lineageNumber } from './lineage-number.js';

/**
 * A partition's numbering of its state lineages (`ruleId@epoch`) for checkpoint fields (v5).
 *
 * Why: a key holds state in one lineage per rule that keys by it, and a checkpoint rewrites the
 * key's whole field when any of them changes. Written out, lineage ids were half of each field
 * (29 lineages of `["thr-0034@1",null,…]` in the benchmark's keys). Fields now name a lineage by
 * a small number, and the checkpoint stores the numbers once per partition, next to its meta.
 *
 * The numbering is append-only: a number is never given to another lineage while the partition
 * lives, so a field written at any checkpoint reads the same later. A number is let go when its
 * lineage is dropped: the same checkpoint that rewrites the keys that held the lineage deletes
 * it from the store. A restored partition numbers new lineages after the highest stored number;
 * no stored field can name a number the store no longer holds, since both change in one write.
 */
export class LineageIndex {
  private readonly ids = new Map<string, number>();
  /** Lineages by number: an array read per entry a restore decodes, not a hash. */
  private readonly names: (string | undefined)[] = [];
  /** Numbers by the lineage's number in this thread (`lineageNumber`): an array read per entry, not a hash. */
  private readonly byLin: number[] = [];
  private next = 1;
  /** Numbers given since the last checkpoint took them, with their lineage. */
  private added: [number, string][] = [];
  /** Numbers let go since the last checkpoint took them. */
  private removed: number[] = [];

  /** The lineage's number, given now (and stored at the next checkpoint) if it has none. */
  numberOf(sid: string): number {
    let n = this.ids.get(sid);
    if (n === undefined) {
      n = this.next++;
      this.ids.set(sid, n);
      this.names[n] = sid;
      this.added.push([n, sid]);
    }
    return n;
  }

  /** The number of the lineage whose number in this thread is `lin`; 0 when not looked up yet (see {@link numberForLin}). */
  numberByLin(lin: number): number {
    return this.byLin[lin] ?? 0;
  }

  /** {@link numberOf} of lineage `sid`, whose number in this thread is `lin`, kept for {@link numberByLin}. */
  numberForLin(lin: number, sid: string): number {
    return (this.byLin[lin] = this.numberOf(sid));
  }

  /** The lineage a stored field names by `n`; undefined when the partition holds no such number. */
  nameOf(n: number): string | undefined {
    return this.names[n];
  }

  /** The lineage's number, undefined when it has none (without giving one). */
  numberIfAny(sid: string): number | undefined {
    return this.ids.get(sid);
  }

  /** Lets the lineage's number go (its lineage was dropped); the next checkpoint deletes it. */
  release(sid: string): void {
    const n = this.ids.get(sid);
    if (n === undefined) return;
    this.ids.delete(sid);
    this.names[n] = undefined;
    this.byLin[lineageNumber(sid)] = 0;
    this.removed.push(n);
  }

  /** The numbers given and let go since the last call, for a checkpoint to write. */
  take(): { added: readonly (readonly [number, string])[]; removed: readonly number[] } {
    const taken = { added: this.added, removed: this.removed };
    this.added = [];
    this.removed = [];
    return taken;
  }

  /**
   * Hands back what a checkpoint that was not written took: the next one writes it. A number
   * let go meanwhile is not written again as given (a checkpoint writes additions first).
   */
  requeue(added: readonly (readonly [number, string])[], removed: readonly number[]): void {
    for (const [n, sid] of added) if (this.ids.get(sid) === n) this.added.push([n, sid]);
    this.removed.push(...removed);
  }

  /** Takes a stored numbering in (restore), as the store holds it. */
  restore(entries: Iterable<readonly [number, string]>): void {
    for (const [n, sid] of entries) {
      this.ids.set(sid, n);
      this.names[n] = sid;
      if (n >= this.next) this.next = n + 1;
    }
  }

  /** Every lineage with a number. */
  lineages(): IterableIterator<string> {
    return this.ids.keys();
  }

  /** `[number, lineage]` of every lineage with a number. */
  *entries(): IterableIterator<[number, string]> {
    for (const [sid, n] of this.ids) yield [n, sid];
  }

  /** How many lineages have a number. */
  get size(): number {
    return this.ids.size;
  }
}
