import { storedAtMs } from '../../protocol/index.js';

/** What the reply subject of a JetStream message says about it. */
export interface AckReplyInfo {
  streamSeq: number;
  deliverySeq: number;
  /** When the server stored it, in whole ms since the epoch ({@link storedAtMs}). */
  storedAt: number;
  pending: number;
}

/**
 * Reads `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<nanos>.<pending>` (and the form
 * with domain and account hash in front and a random token at the end) into `out`, without
 * splitting it: a partition reads tens of thousands a second, and the client's `split` into
 * eleven strings was a visible share of a worker's time (bench/README.md). False if it is not one.
 */
export function parseAckReply(reply: string, out: AckReplyInfo): boolean {
  if (!reply.startsWith('$JS.ACK.')) return false;
  // The dots after `$JS.ACK.`: 6 in the short form, 9 in the long one.
  const dots = DOTS;
  let k = 0;
  for (let j = reply.indexOf('.', 8); j >= 0; j = reply.indexOf('.', j + 1)) {
    if (k === 9) return false;
    dots[k++] = j;
  }
  // The number tokens follow `<stream>.<consumer>`: after dot 1 (short) or dot 3 (long).
  const b = k === 6 ? 1 : k === 9 ? 3 : -1;
  if (b < 0) return false;
  const end = k === 6 ? reply.length : (dots[8] as number);
  const d0 = dots[b] as number;
  const d1 = dots[b + 1] as number;
  const d2 = dots[b + 2] as number;
  const d3 = dots[b + 3] as number;
  const d4 = dots[b + 4] as number;
  const d5 = k === 6 ? end : (dots[b + 5] as number);
  if (digits(reply, d0 + 1, d1) < 0) return false;
  const sseq = digits(reply, d1 + 1, d2);
  const dseq = digits(reply, d2 + 1, d3);
  const pending = digits(reply, d4 + 1, d5);
  if (sseq < 0 || dseq < 0 || pending < 0) return false;
  // The time as `storedAtMs` computes it from the client's parse (parseInt of the digits), so
  // that the service and the readers that use the client (back-tests, the tests' reference run)
  // judge every event at the same ms. Its digits are checked first, as parseInt would stop at a
  // bad one.
  for (let i = d3 + 1; i < d4; i++) {
    const c = reply.charCodeAt(i);
    if (c < 48 || c > 57) return false;
  }
  if (d4 === d3 + 1) return false;
  out.streamSeq = sseq;
  out.deliverySeq = dseq;
  out.storedAt = storedAtMs({ timestampNanos: parseInt(reply.slice(d3 + 1, d4), 10) });
  out.pending = pending;
  return true;
}

const DOTS = new Int32Array(9);

/** The number written in `s[start, end)`, or -1 unless it is one or more decimal digits. */
function digits(s: string, start: number, end: number): number {
  if (end <= start) return -1;
  let v = 0;
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return -1;
    v = v * 10 + c;
  }
  return v;
}
