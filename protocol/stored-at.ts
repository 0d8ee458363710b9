/**
 * When the server stored a message, in whole milliseconds since the epoch: the default event time,
 * an integer like a payload's `ts`. The service, back-tests and the tests' reference run all read
 * it through this, so they judge every event at the same time.
 */
export function storedAtMs(info: { readonly timestampNanos: number }): number {
  return Math.floor(info.timestampNanos / 1_000_000);
}
