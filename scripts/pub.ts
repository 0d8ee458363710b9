/**
 * `npm run pub -- <subject> '<json>' [--wait-dlq[=ms]]`: publishes one message to JetStream
 * (NATS_URL, default nats://127.0.0.1:4222; NATS_USER and NATS_PASSWORD on a server with users).
 * With `--wait-dlq` (default 2000 ms) it then waits that long for the service to dead-letter the
 * message and says why if it did. Exit codes: 0 stored (and, with --wait-dlq, not dead-lettered
 * in that time), 1 not stored, 2 usage, 3 dead-lettered, 4 stored but the DLQ could not be read.
 */
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { DlqReader } from '../control-plane/index.js';

const args = process.argv.slice(2);
const waitFlag = args.find((a) => a === '--wait-dlq' || a.startsWith('--wait-dlq='));
const waitDlqMs =
  waitFlag === undefined
    ? undefined
    : waitFlag === '--wait-dlq'
      ? 2000
      : Number(waitFlag.slice(11));
const [subject, body, extra] = args.filter((a) => a !== waitFlag);
if (
  !subject ||
  body === undefined ||
  extra !== undefined ||
  (waitDlqMs !== undefined && !(Number.isSafeInteger(waitDlqMs) && waitDlqMs > 0))
) {
  console.error(
    `usage: npm run pub -- <subject> '<json>' [--wait-dlq[=ms]]   e.g. npm run pub -- events.c-7 '{"type":"payment","amount":950}' --wait-dlq`,
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

function cannotRead(why: string): void {
  console.error(
    `pub: stored, but the DLQ stream cannot be read to see whether it was dead-lettered (${why}); ask with a user that may read DLQ`,
  );
  process.exitCode = 4;
}

/**
 * Waits for the dead letters of the message stored at `ack` (matched by the source stream and
 * sequence the service records on each); `before` is DLQ's last sequence before publishing.
 */
async function reportDeadLetters(
  dlq: DlqReader,
  ack: { stream: string; seq: number },
  before: number,
  waitMs: number,
): Promise<void> {
  let letters;
  try {
    letters = await dlq.lettersOf(ack, before, waitMs);
  } catch (e) {
    cannotRead((e as Error).message);
    return;
  }
  if (letters.length === 0) {
    console.log(
      `not dead-lettered within ${waitMs} ms (judged, or not read yet: a service behind, or an event held for its out-of-order bound)`,
    );
    return;
  }
  for (const l of letters)
    console.log(
      `dead-lettered: ${l.reason}${l.ruleId === undefined ? '' : ` (rule ${l.ruleId})`}: ${l.error} (DLQ sequence ${l.seq}; once fixed: npx vigil dlq replay --seq ${l.seq})`,
    );
  process.exitCode = 3;
}

try {
  const js = jetstream(nc);
  let dlq: { reader: DlqReader; before: number } | string | undefined;
  if (waitDlqMs !== undefined) {
    // Where DLQ ends before publishing: a dead letter of this message comes after it.
    try {
      const reader = new DlqReader(js, await jetstreamManager(nc, { timeout: 2000 }));
      dlq = { reader, before: (await reader.state()).lastSeq };
    } catch (e) {
      dlq = (e as Error).message;
    }
  }
  const ack = await js.publish(subject, body, { timeout: 5000 });
  console.log(`stored in ${ack.stream} at sequence ${ack.seq}`);
  if (typeof dlq === 'string') cannotRead(dlq);
  else if (dlq !== undefined && waitDlqMs !== undefined)
    await reportDeadLetters(dlq.reader, ack, dlq.before, waitDlqMs);
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
