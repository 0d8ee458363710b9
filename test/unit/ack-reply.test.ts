import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseAckReply, type AckReplyInfo } from '../../service/index.js';
import { storedAtMs } from '../../protocol/index.js';

const blank = (): AckReplyInfo => ({ streamSeq: -1, deliverySeq: -1, storedAt: -1, pending: -1 });

/** What the client's own parse (split on dots, parseInt) reads from a reply. */
function clientParse(reply: string): AckReplyInfo {
  const t = reply.split('.');
  if (t.length === 9) t.splice(2, 0, '_', '');
  return {
    streamSeq: parseInt(t[7] as string, 10),
    deliverySeq: parseInt(t[8] as string, 10),
    storedAt: storedAtMs({ timestampNanos: parseInt(t[9] as string, 10) }),
    pending: parseInt(t[10] as string, 10),
  };
}

describe('parseAckReply', () => {
  it('reads the reply subject of a JetStream message as the client does, in both forms', () => {
    const nanos = fc.bigInt({ min: 0n, max: 4_000_000_000_000_000_000n });
    const seq = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
    fc.assert(
      fc.property(fc.boolean(), seq, seq, seq, nanos, seq, (domain, dc, s, d, ns, pending) => {
        const body = `EVENTS.vigil_p3_abc.${dc}.${s}.${d}.${ns}.${pending}`;
        const reply = domain ? `$JS.ACK.hub.ACCHASH.${body}.r4nd0m` : `$JS.ACK.${body}`;
        const out = blank();
        expect(parseAckReply(reply, out)).toBe(true);
        expect(out).toEqual(clientParse(reply));
      }),
    );
  });

  it('keeps the milliseconds of a time whose nanoseconds a double cannot hold', () => {
    const out = blank();
    expect(parseAckReply('$JS.ACK.EVENTS.c.1.42.7.1764698400123456789.0', out)).toBe(true);
    expect(out).toEqual({ streamSeq: 42, deliverySeq: 7, storedAt: 1764698400123, pending: 0 });
  });

  it('refuses subjects that are not JetStream acks', () => {
    for (const reply of [
      '',
      '_INBOX.abc',
      '$JS.ACK.EVENTS.c.1.2.3.4',
      '$JS.ACK.EVENTS.c.1.x.3.4.5',
      '$JS.ACK.EVENTS.c.1.2..4.5',
      '$JS.ACK.EVENTS.c.1.2.3.4.',
      '$JS.ACK.EVENTS.c.1.2.3.4x.5',
      '$JS.ACK.EVENTS.c.1.2.3.4.5.6',
      '$JS.ACK.hub.H.EVENTS.c.1.2.3.4.5',
      '$JS.ACK.hub.H.EVENTS.c.1.2.3.4.5.r.x',
    ]) {
      const out = blank();
      expect({ reply, ok: parseAckReply(reply, out) }).toEqual({ reply, ok: false });
      expect(out).toEqual(blank());
    }
  });
});
