import { ServiceError, ServiceErrorCode } from '../errors.js';

/**
 * What a status message from JetStream on a pull consumer's inbox (a message without a reply
 * subject) asks of the consumer. Decided here from the code, the description and
 * `Nats-Pending-Messages` alone, so every case is tested without a server that produces it.
 */
export type PullStatus =
  /** 100: a heartbeat while a pull waits with nothing to deliver. */
  | { readonly kind: 'heartbeat' }
  /** 503, 409 "consumer deleted" or "leadership change": the consumer is gone, make another. */
  | { readonly kind: 'remake' }
  /**
   * 409 "exceeded MaxRequestBatch of n" with n below the batch asked for: the server refuses
   * every pull over n (all those outstanding, each asked for more); ask for n at a time.
   */
  | { readonly kind: 'capped'; readonly batch: number }
  /**
   * 400, a 409 for another server limit, or a batch cap that leaves nothing smaller to ask for:
   * asking again would only repeat the refusal.
   */
  | { readonly kind: 'refused'; readonly description: string }
  /**
   * 404, 408, other 409s: a pull ended. `released` records of it were not delivered (0 when the
   * server did not say: the pull is then still counted as outstanding; if none is, heartbeats
   * stop and the consumer is made again).
   */
  | { readonly kind: 'ended'; readonly released: number };

export function pullStatus(
  code: number,
  description: string,
  pendingMessages: string,
  batch: number,
): PullStatus {
  if (code === 100) return { kind: 'heartbeat' };
  if (code === 400) return { kind: 'refused', description };
  if (code === 503) return { kind: 'remake' };
  if (code === 409) {
    if (/consumer (is )?deleted|leadership change/i.test(description)) return { kind: 'remake' };
    const cap = /exceeded maxrequestbatch of (\d+)/i.exec(description);
    if (cap !== null && Number(cap[1]) > 0 && Number(cap[1]) < batch)
      return { kind: 'capped', batch: Number(cap[1]) };
    if (/exceeded max ?request|exceeds max ?bytes/i.test(description))
      return { kind: 'refused', description };
  }
  const left = Number(pendingMessages);
  return { kind: 'ended', released: Number.isSafeInteger(left) && left > 0 ? left : 0 };
}

/** The error a partition's source ends with when JetStream refuses its pulls (status `refused`). */
export function pullRefused(
  log: { readonly stream: string; readonly label: string },
  description: string,
  batch: number,
  expiresMs: number,
): ServiceError {
  return new ServiceError(
    ServiceErrorCode.Nats,
    `${log.label}: JetStream refused the pull of its consumer on ${log.stream}: ${description}; a pull asks for up to ${batch} records and waits up to ${expiresMs} ms; check the server's JetStream limits (max_request_expires, max_request_max_bytes)`,
    { retryable: false },
  );
}
