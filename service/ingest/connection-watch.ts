import type { NatsConnection } from '@nats-io/transport-node';

/** What happened to a connection, as a partition's consumer needs to know it. */
export type ConnectionEvent = 'disconnect' | 'reconnect' | 'closed';

const watchers = new WeakMap<NatsConnection, Set<(e: ConnectionEvent) => void>>();

/**
 * Calls `listener` when `nc` disconnects, reconnects or closes; returns the function that stops
 * it. One status iterator per connection, shared by the connection's partitions.
 */
export function watchConnection(
  nc: NatsConnection,
  listener: (e: ConnectionEvent) => void,
): () => void {
  let set = watchers.get(nc);
  if (set === undefined) {
    const listeners = new Set<(e: ConnectionEvent) => void>();
    set = listeners;
    watchers.set(nc, listeners);
    const tell = (e: ConnectionEvent): void => {
      for (const l of [...listeners]) l(e);
    };
    // The status iterator ends when the connection closes.
    void (async () => {
      for await (const s of nc.status())
        if (s.type === 'disconnect' || s.type === 'reconnect') tell(s.type);
    })()
      .catch(() => undefined)
      .finally(() => tell('closed'));
  }
  set.add(listener);
  const listeners = set;
  return () => listeners.delete(listener);
}
