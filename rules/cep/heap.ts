/** A binary min-heap; `less` must be a strict total order so that pops are deterministic. */
export class Heap<T> {
  private readonly items: T[] = [];

  constructor(private readonly less: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  peek(): T | undefined {
    return this.items[0];
  }

  push(item: T): void {
    const a = this.items;
    a.push(item);
    let i = a.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const x = a[i] as T;
      const up = a[parent] as T;
      if (!this.less(x, up)) break;
      // Swapped through locals: a destructuring swap allocated an array per step here.
      a[i] = up;
      a[parent] = x;
      i = parent;
    }
  }

  pop(): T | undefined {
    const a = this.items;
    const top = a[0];
    const last = a.pop();
    if (a.length > 0 && last !== undefined) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && this.less(a[l] as T, a[m] as T)) m = l;
        if (r < a.length && this.less(a[r] as T, a[m] as T)) m = r;
        if (m === i) break;
        const x = a[i] as T;
        a[i] = a[m] as T;
        a[m] = x;
        i = m;
      }
    }
    return top;
  }

  /** The items in no particular order (the heap's own array: read it, do not change it). */
  unordered(): readonly T[] {
    return this.items;
  }

  /** The items in pop order (a copy; the heap is unchanged). */
  sorted(): T[] {
    const copy = new Heap<T>(this.less);
    for (const x of this.items) copy.push(x);
    const out: T[] = [];
    for (let x = copy.pop(); x !== undefined; x = copy.pop()) out.push(x);
    return out;
  }
}
