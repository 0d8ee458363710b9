import type { NatsConnection } from '@nats-io/transport-node';
import { DeliverPolicy, jetstream } from '@nats-io/jetstream';
import type { Alert, ControlMessage, Rule } from '../rules/index.js';
import { CONTROL_SUBJECT, eventSubject, Streams } from '../protocol/index.js';

/** The demo's rules: one of each kind, over payment-like events. */
const DEMO_RULES: readonly Rule[] = [
  {
    id: 'big-payment',
    on: ['payment'],
    key: 'cardId',
    when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 900 }] },
    alert: { severity: 'medium', title: 'payment of {{amount}} on {{cardId}}' },
  },
  {
    id: 'blocked-card',
    on: ['payment'],
    key: 'cardId',
    when: { all: [{ fact: 'cardId', operator: 'in', value: { fact: 'list:blocked-cards' } }] },
    alert: { severity: 'high', title: 'blocked card {{cardId}} used', suppressFor: '1m' },
  },
  {
    id: 'card-testing',
    description: 'many small payments on one card',
    on: ['payment'],
    key: 'cardId',
    when: { all: [{ fact: 'amount', operator: 'lessThan', value: 5 }] },
    pattern: { kind: 'threshold', aggregate: 'count', window: '1m', operator: '>=', value: 5 },
    alert: { severity: 'high', title: 'card testing on {{cardId}}', suppressFor: '1m' },
  },
  {
    id: 'login-then-drain',
    on: ['login', 'payment'],
    key: 'cardId',
    pattern: {
      kind: 'sequence',
      within: '30s',
      steps: [
        {
          name: 'login',
          on: ['login'],
          when: { all: [{ fact: 'newDevice', operator: 'equal', value: true }] },
        },
        {
          name: 'drain',
          on: ['payment'],
          when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 500 }] },
        },
      ],
    },
    alert: { severity: 'high', title: 'new-device login then large payment on {{cardId}}' },
  },
  {
    id: 'unconfirmed-order',
    on: ['order'],
    key: 'orderId',
    pattern: { kind: 'absence', within: '5s', expect: { on: ['confirm'] } },
    alert: { severity: 'low', title: 'order {{orderId}} not confirmed within 5s' },
  },
];

/** The demo's control messages: its lookup table of stolen cards, then its rules. */
export const DEMO_CONTROL: readonly ControlMessage[] = [
  {
    op: 'upsert-model',
    model: { id: 'blocked-cards', kind: 'lookup', values: ['c-13', 'c-42'] },
    meta: { actor: 'demo', reason: 'known stolen cards' },
  },
  ...DEMO_RULES.map((rule): ControlMessage => ({
    op: 'upsert-rule',
    rule,
    meta: { actor: 'demo' },
  })),
];

const encoder = new TextEncoder();

/** Publishes the demo rules through the control topic, like any operator would. */
export async function publishDemoRules(nc: NatsConnection): Promise<void> {
  const js = jetstream(nc);
  for (const m of DEMO_CONTROL)
    await js.publish(CONTROL_SUBJECT, encoder.encode(JSON.stringify(m)));
}

/** A producer of payment-like events: mostly ordinary, with card testing, blocked cards, new-device logins and orders. */
export function startDemoProducer(
  nc: NatsConnection,
  eventsPerSecond = 20,
): { stop(): Promise<void> } {
  const js = jetstream(nc);
  let n = 0;
  let stopped = false;
  const pending = new Set<Promise<unknown>>();
  const send = (key: string, event: Record<string, unknown>): void => {
    const p = js
      .publish(
        eventSubject(key),
        encoder.encode(JSON.stringify({ id: `demo-${++n}`, ts: Date.now(), ...event })),
      )
      .catch(() => undefined);
    pending.add(p);
    void p.finally(() => pending.delete(p));
  };
  const timer = setInterval(() => {
    if (stopped) return;
    const r = Math.random();
    const card = `c-${1 + Math.floor(Math.random() * 60)}`;
    if (r < 0.02)
      for (let i = 0; i < 6; i++)
        send(card, { type: 'payment', cardId: card, amount: 1 + (i % 3), country: 'US' });
    else if (r < 0.04) {
      send(card, { type: 'login', cardId: card, newDevice: true });
      send(card, {
        type: 'payment',
        cardId: card,
        amount: 700 + Math.floor(Math.random() * 500),
        country: 'NG',
      });
    } else if (r < 0.06) {
      const order = `o-${n}`;
      send(order, { type: 'order', orderId: order, amount: 30 });
      if (Math.random() < 0.5)
        setTimeout(() => !stopped && send(order, { type: 'confirm', orderId: order }), 1000);
    } else
      send(card, {
        type: 'payment',
        cardId: card,
        amount: Math.round(Math.random() * 1000 * 100) / 100,
        country: Math.random() < 0.9 ? 'US' : 'BR',
      });
  }, 1000 / eventsPerSecond);
  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      await Promise.all([...pending]);
    },
  };
}

/** Follows `ALERTS` from now on and hands each alert to `onAlert`. */
export async function followAlerts(
  nc: NatsConnection,
  onAlert: (a: Alert) => void,
): Promise<{ stop(): Promise<void> }> {
  const js = jetstream(nc);
  const consumer = await js.consumers.get(Streams.alerts, { deliver_policy: DeliverPolicy.New });
  const messages = await consumer.consume();
  void (async () => {
    for await (const m of messages) onAlert(m.json<Alert>());
  })();
  return { stop: async () => void (await messages.close()) };
}
