import { VigilError } from '../rules/index.js';

/**
 * NATS client errors that say the server was slow or away, not that the request was wrong: a
 * JetStream API call that times out while the machine is saturated, or one made while the
 * client reconnects.
 */
const TRANSIENT_NATS = new Set(['TimeoutError', 'ConnectionError', 'RequestError', 'NoResponders']);

/**
 * True when trying the same call again later can help: a transient NATS failure, a Redis
 * connection that is closed or reconnecting, or a Vigil error marked retryable.
 */
export function isTransient(err: unknown): boolean {
  if (err instanceof VigilError) return err.retryable;
  if (!(err instanceof Error)) return false;
  if (TRANSIENT_NATS.has(err.name)) return true;
  // ioredis, while its connection is down (commands are queued otherwise: maxRetriesPerRequest null).
  return err.message === 'Connection is closed.' || err.name === 'MaxRetriesPerRequestError';
}

/** The wait before try `attempt` + 1 (from 0): `firstMs` doubled each time, capped at `maxMs`. */
export function backoffMs(attempt: number, firstMs: number, maxMs: number): number {
  return Math.min(maxMs, firstMs * 2 ** attempt);
}

/**
 * Runs `attempt` until it succeeds, waiting between tries (doubling from `firstDelayMs` up to
 * `maxDelayMs`) while its failures are {@link isTransient} and `abandoned()` is false. A failure
 * that retrying cannot help is thrown at once; `abandoned()` turning true ends the loop with
 * undefined. `onRetry` hears each transient failure before the wait.
 */
export async function retryTransient<T>(
  attempt: () => Promise<T>,
  o: {
    readonly abandoned: () => boolean;
    readonly onRetry: (err: Error, attempt: number, delayMs: number) => void;
    readonly firstDelayMs?: number;
    readonly maxDelayMs?: number;
  },
): Promise<T | undefined> {
  const first = o.firstDelayMs ?? 250;
  const max = o.maxDelayMs ?? 5000;
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      if (o.abandoned()) return undefined;
      if (!isTransient(err)) throw err;
      const delayMs = backoffMs(n - 1, first, max);
      o.onRetry(err as Error, n, delayMs);
      await new Promise((r) => setTimeout(r, delayMs));
      if (o.abandoned()) return undefined;
    }
  }
}
