import { DeliverPolicy, type ConsumerMessages, type JetStreamClient } from '@nats-io/jetstream';
import { Histogram, type Registry } from 'prom-client';
import { Streams } from '../../protocol/index.js';

const decoder = new TextDecoder();

/**
 * End-to-end alert latency, measured where consumers see alerts: an ordered consumer on `ALERTS`
 * (new messages only) observes, for each stored alert, the time from the event time at which it
 * fired (`alert.ts`) to JetStream storing it. Read from the stream, not from the publishes, so
 * a replayed duplicate that `ALERTS` dropped is not counted. Each process observes only the alerts
 * of the partitions it runs (`owned`), so with several processes every alert counts once.
 */
export async function followAlertLatency(
  js: JetStreamClient,
  registry: Registry,
  owned: () => ReadonlySet<number>,
): Promise<{ stop(): Promise<void> }> {
  const latency = new Histogram({
    name: 'vigil_alert_latency_seconds',
    help: 'From the event time at which an alert fired to ALERTS storing it (includes the producer delay when events carry their own ts)',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    registers: [registry],
  });
  let stopped = false;
  let messages: ConsumerMessages | undefined;
  const follow = async (): Promise<void> => {
    const consumer = await js.consumers.get(Streams.alerts, { deliver_policy: DeliverPolicy.New });
    messages = await consumer.consume();
    if (stopped) return void (await messages.close());
    for await (const m of messages) {
      let alert: { ts?: unknown; partition?: unknown };
      try {
        alert = JSON.parse(decoder.decode(m.data)) as typeof alert;
      } catch {
        continue;
      }
      if (typeof alert.ts !== 'number' || typeof alert.partition !== 'number') continue;
      if (!owned().has(alert.partition)) continue;
      const stored = Number(m.info.timestampNanos / 1_000_000);
      latency.observe(Math.max(0, stored - alert.ts) / 1000);
    }
  };
  // A metric must never take the service down: if following fails (NATS away at the wrong
  // moment), start again from new alerts a little later.
  const done = (async () => {
    while (!stopped) {
      await follow().catch(() => undefined);
      if (!stopped) await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await messages?.close();
      await done;
    },
  };
}
