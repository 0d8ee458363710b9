import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { HopSender, type HopTransport } from '../../service/output/hop-sender.js';

/**
 * A stream that stores publishes in the order they reach it, and a script of failures: a
 * publish is lost (not stored, error), or stored with its acknowledgement lost (error).
 */
function flakyStream(fails: Map<number, 'lost' | 'no-ack'>) {
  const stored: { subject: string; n: number }[] = [];
  let call = 0;
  const transport: HopTransport = {
    send(subject, data, done) {
      const i = call++;
      const fail = fails.get(i);
      if (fail !== 'lost') stored.push({ subject, n: Number(new TextDecoder().decode(data)) });
      // Answers come back after a while, in any order.
      setTimeout(() => done(fail === undefined ? undefined : new Error(fail)), (i * 7) % 5);
    },
  };
  return { transport, stored };
}

/** What a downstream takes of a subject's messages: n only after n − 1. */
function taken(stored: { subject: string; n: number }[], subject: string): number[] {
  const out: number[] = [];
  for (const m of stored) if (m.subject === subject && m.n === out.length + 1) out.push(m.n);
  return out;
}

const enc = (n: number): Uint8Array => new TextEncoder().encode(String(n));

describe('HopSender', () => {
  it('gets every message taken in order whatever publishes fail, and settles once all are stored', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 60 }),
        fc.array(fc.tuple(fc.nat(150), fc.constantFrom('lost' as const, 'no-ack' as const)), {
          maxLength: 8,
        }),
        fc.integer({ min: 1, max: 8 }),
        async (count, failures, maxInFlight) => {
          const { transport, stored } = flakyStream(new Map(failures));
          const sender = new HopSender(transport, maxInFlight);
          const counts = [0, 0];
          for (let i = 0; i < count; i++) {
            const s = i % 2;
            counts[s] = (counts[s] as number) + 1;
            await sender.send(`rekey.card.${s}`, enc(counts[s] as number));
          }
          await sender.settled();
          expect(sender.pending).toBe(0);
          for (const s of [0, 1])
            expect(taken(stored, `rekey.card.${s}`)).toEqual(
              Array.from({ length: counts[s] as number }, (_, i) => i + 1),
            );
        },
      ),
      { numRuns: 60 },
    );
  }, 60_000);

  it('holds the sender back at maxInFlight unacknowledged', async () => {
    const answers: (() => void)[] = [];
    const transport: HopTransport = { send: (_s, _d, done) => void answers.push(() => done()) };
    const sender = new HopSender(transport, 2);
    expect(sender.send('a', enc(1))).toBeUndefined();
    expect(sender.send('a', enc(2))).toBeUndefined();
    const wait = sender.send('a', enc(3));
    expect(wait).toBeInstanceOf(Promise);
    expect(answers).toHaveLength(2);
    answers[0]?.();
    await wait;
    await new Promise((r) => setImmediate(r));
    expect(answers).toHaveLength(3);
  });
});
