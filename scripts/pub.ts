/**
 * `npm run pub -- <subject> '<json>'`: publishes one message to JetStream (NATS_URL, default
 * nats://127.0.0.1:4222; NATS_USER and NATS_PASSWORD on a server with users).
 */
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';

const [subject, body] = process.argv.slice(2);
if (!subject || body === undefined) {
  console.error(
    `usage: npm run pub -- <subject> '<json>'   e.g. npm run pub -- events.c-7 '{"type":"payment","amount":950}'`,
  );
  process.exit(2);
}
const nc = await connect({
  servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
  // A server with users (npm start -- --nats-auth): the user to publish as.
  ...(process.env.NATS_USER
    ? { user: process.env.NATS_USER, pass: process.env.NATS_PASSWORD ?? '' }
    : {}),
});
const ack = await jetstream(nc).publish(subject, body);
console.log(`stored in ${ack.stream} at sequence ${ack.seq}`);
await nc.close();
