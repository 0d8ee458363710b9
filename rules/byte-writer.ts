/**
 * Text written straight into UTF-8 bytes, for checkpoint fields. Why not strings: a checkpoint
 * writes thousands of fields of a kilobyte or two, built from many small pieces. As strings,
 * every piece was a rope node to collect, the ropes were flattened and encoded again on their
 * way to the socket, and the collector copied whatever was alive; together that was most of a
 * checkpoint's cost.
 */
export class ByteWriter {
  private buf: Uint8Array;
  private at = 0;
  private static readonly encoder = new TextEncoder();

  constructor(initialBytes = 4096) {
    this.buf = new Uint8Array(Math.max(16, initialBytes));
  }

  /** Bytes written so far. */
  get length(): number {
    return this.at;
  }

  /** The bytes written so far (a view, valid until the next write). */
  bytes(): Uint8Array {
    return this.buf.subarray(0, this.at);
  }

  /** Makes room for `n` more bytes (callers check first, so that the common case is one compare). */
  private grow(n: number): void {
    let size = this.buf.length * 2;
    while (size < this.at + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.at));
    this.buf = next;
  }

  /** One byte (an ASCII character code). */
  byte(c: number): void {
    if (this.at === this.buf.length) this.grow(1);
    this.buf[this.at++] = c;
  }

  /**
   * A string known to hold only ASCII (char codes below 128), such as JSON punctuation, a
   * lineage id or a number's text. Not checked: anything else goes through {@link text}.
   */
  ascii(s: string): void {
    const n = s.length;
    if (this.at + n > this.buf.length) this.grow(n);
    const buf = this.buf;
    let at = this.at;
    for (let i = 0; i < n; i++) buf[at++] = s.charCodeAt(i);
    this.at = at;
  }

  /** Any string, as UTF-8 (lone surrogates become U+FFFD, as `TextEncoder` writes them). */
  text(s: string): void {
    // At most three bytes per UTF-16 unit.
    if (this.at + s.length * 3 > this.buf.length) this.grow(s.length * 3);
    this.at += ByteWriter.encoder.encodeInto(s, this.buf.subarray(this.at)).written;
  }

  /** A number as `String(x)` writes it (JSON's form for finite numbers). */
  number(x: number): void {
    // Small non-negative integers (timestamps as offsets, counts, indices) without a string.
    // -0 too: String(-0) is "0".
    if (x >= 0 && (x | 0) === x) {
      if (x < 10) {
        this.byte(48 + x);
        return;
      }
      let digits = 1;
      for (let y = x; y >= 10; y = (y / 10) | 0) digits++;
      if (this.at + digits > this.buf.length) this.grow(digits);
      const buf = this.buf;
      let at = this.at + digits;
      this.at = at;
      for (let y = x; ;) {
        const q = (y / 10) | 0;
        buf[--at] = 48 + (y - q * 10);
        if (q === 0) break;
        y = q;
      }
      return;
    }
    this.ascii(String(x));
  }
}
