/**
 * `npm run pub -- <subject> '<json>'`: publishes one message to JetStream (NATS_URL, default
 * nats://127.0.0.1:4222; NATS_USER and NATS_PASSWORD on a server with users).
 */
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';

const [subject, body] = process.argv.slice(2);
if (!subject || body === undefined) {
  console.error(
    `usage: npm run pub -- <subject> '<json>'   e.g. npm run pub -- events.c-7 '{"type":"payment","amount":950}'`,
  );
  process.exit(2);
}
const servers = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const nc = await connect({
  servers,
  // A server with users (npm start -- --nats-auth): the user to publish as.
  ...(process.env.NATS_USER
    ? { user: process.env.NATS_USER, pass: process.env.NATS_PASSWORD ?? '' }
    : {}),
}).catch((e: Error) => {
  console.error(`pub: cannot connect to NATS at ${servers}: ${e.message}; set NATS_URL`);
  process.exit(1);
});

/** The streams' subjects, as far as this user may ask; the usual ones otherwise. */
async function subjectsHeld(): Promise<string> {
  try {
    const jsm = await jetstreamManager(nc, { timeout: 2000 });
    const out: string[] = [];
    for await (const s of jsm.streams.list())
      out.push(`${s.config.name}: ${(s.config.subjects ?? []).join(' ')}`);
    return out.join('; ');
  } catch {
    return 'EVENTS: events.<key> (the server maps it to events.<key>.<partition>); CONTROL: vigil.control';
  }
}

try {
  const ack = await jetstream(nc).publish(subject, body, { timeout: 5000 });
  console.log(`stored in ${ack.stream} at sequence ${ack.seq}`);
} catch (e) {
  // No stream takes the subject (or the user may not publish it): say what would be stored.
  // The client reports a subject no stream holds as "jetstream is not enabled" (nobody answered).
  const why = /not enabled|no responders/i.test((e as Error).message)
    ? 'no stream stores this subject'
    : (e as Error).message;
  console.error(
    `pub: ${subject} was not stored (${why}); streams and their subjects: ${await subjectsHeld()}`,
  );
  process.exitCode = 1;
} finally {
  await nc.close();
}
