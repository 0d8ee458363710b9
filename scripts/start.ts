/**
 * `npm start`: installs what is missing, starts nats-server and redis-server on loopback with data
 * under .vigil/ (unless NATS_URL / REDIS_URL point at servers you run), starts the service, and
 * runs a demo (rules through the control topic, a producer of payment-like events, alerts printed).
 * `npm start -- --no-demo` runs the bare service. `npm start -- --nats-auth` starts nats-server
 * with Vigil's users and permissions (control-plane/nats-auth.example.conf), their passwords made
 * for the session and kept in .vigil/nats-users.json; the service, the demo's producer, its rule
 * publisher and its alert follower each connect as their user. Ctrl-C stops everything it started.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { resolveOptions } from '../service/index.js';
import {
  ensureServersInstalled,
  freePort,
  startNats,
  startRedis,
  type NatsUsers,
  type ServerHandle,
} from './local-servers.js';
import { followAlerts, publishDemoRules, startDemoProducer } from './demo.js';
import { API_ENV, resolveControlPlaneOptions } from '../control-plane/index.js';
import { startVigil } from '../app/index.js';

const noDemo = process.argv.includes('--no-demo');
const natsAuth = process.argv.includes('--nats-auth');
const say = (line: string): void => console.log(`[vigil] ${line}`);
// A write to a closed stdout (`npm start | head`, a terminal gone) would end this script with an
// uncaught EPIPE and leave the servers it started running: once they are up, it stops everything
// instead (at once, if stdout closed while they were starting).
const stdoutClosed = new Promise<void>((resolve) => process.stdout.on('error', () => resolve()));

async function portOr(preferred: number): Promise<number> {
  const { createServer } = await import('node:net');
  return new Promise((done) => {
    const s = createServer();
    s.once('error', () => void freePort().then(done));
    s.listen(preferred, '127.0.0.1', () => s.close(() => done(preferred)));
  });
}

const base = resolveOptions();
const servers: ServerHandle[] = [];
let natsUrl = process.env.NATS_URL;
let redisUrl = process.env.REDIS_URL;
if (natsAuth && natsUrl) {
  console.error(
    '[vigil] --nats-auth starts a nats-server of its own with users; with NATS_URL set, give the service its user in NATS_USER and NATS_PASSWORD instead',
  );
  process.exit(2);
}
/** With --nats-auth: a password for each user, made for this session. */
const users: NatsUsers | undefined = natsAuth
  ? {
      vigil: randomBytes(18).toString('base64url'),
      operator: randomBytes(18).toString('base64url'),
      producer: randomBytes(18).toString('base64url'),
      alerts: randomBytes(18).toString('base64url'),
    }
  : undefined;
if (!natsUrl || !redisUrl) ensureServersInstalled(say);
if (!natsUrl) {
  const nats = await startNats({
    dataDir: resolve('.vigil/nats'),
    partitions: base.partitions,
    port: await portOr(4222),
    ...(users === undefined ? {} : { users }),
  });
  servers.push(nats);
  natsUrl = nats.url;
  say(`nats-server ${nats.url} (JetStream data in .vigil/nats)`);
  if (users !== undefined) {
    const file = resolve('.vigil/nats-users.json');
    writeFileSync(file, `${JSON.stringify(users, null, 2)}\n`, { mode: 0o600 });
    // A file left by an earlier session keeps its mode when written over.
    chmodSync(file, 0o600);
    say(
      'NATS users vigil, operator, producer and alerts (permissions of control-plane/nats-auth.example.conf); passwords in .vigil/nats-users.json',
    );
  }
}
if (!redisUrl) {
  const redis = await startRedis({ dataDir: resolve('.vigil/redis'), port: await portOr(6379) });
  servers.push(redis);
  redisUrl = redis.url;
  say(`redis-server ${redis.url} (data in .vigil/redis)`);
}
const options = resolveOptions({
  natsUrl,
  redisUrl,
  ...(users === undefined ? {} : { natsUser: 'vigil', natsPassword: users.vigil }),
});
// Without configured tokens, a session admin token in .vigil/api-token (the CLI reads it from there).
let api = resolveControlPlaneOptions(options);
if (api.tokens.length === 0) {
  const token = randomBytes(24).toString('hex');
  mkdirSync(resolve('.vigil'), { recursive: true });
  writeFileSync(resolve('.vigil/api-token'), `${token}\n`, { mode: 0o600 });
  api = resolveControlPlaneOptions(options, {
    tokens: [{ name: 'local-admin', role: 'admin', token }],
  });
  say(`no ${API_ENV.tokens} set: an admin token for this session is in .vigil/api-token`);
}
const vigil = await startVigil(options, api);
const service = vigil.service;
await service.whenReady();
say(
  `service ready: ${options.workers} workers, ${options.partitions} partitions; health ${service.url}/healthz, metrics ${service.url}/metrics`,
);

/** The demo's connection as `user` (with --nats-auth), else as the service connects. */
const conns: NatsConnection[] = [];
async function demoConnection(user: keyof NatsUsers): Promise<NatsConnection> {
  const c = await connect({
    servers: natsUrl,
    ...(users === undefined
      ? options.natsUser === ''
        ? {}
        : { user: options.natsUser, pass: options.natsPassword }
      : { user, pass: users[user] }),
  });
  conns.push(c);
  return c;
}
const stops: (() => Promise<void>)[] = [];
if (!noDemo) {
  const operator = await demoConnection('operator');
  const jsm = await jetstreamManager(operator);
  if ((await jsm.streams.info('CONTROL')).state.last_seq === 0) {
    await publishDemoRules(operator);
    say(
      'demo rules published to vigil.control (big-payment, blocked-card, card-testing, login-then-drain, unconfirmed-order)',
    );
  }
  const follower = await followAlerts(await demoConnection('alerts'), (a) =>
    say(`ALERT ${a.severity.padEnd(6)} ${a.ruleId.padEnd(18)} ${a.title}`),
  );
  const producer = startDemoProducer(await demoConnection('producer'));
  stops.push(
    () => producer.stop(),
    () => follower.stop(),
  );
  say('demo producer publishing ~20 payment-like events/s');
}
say('');
say(
  `publish events:   JetStream publish to events.<key>, a JSON object with "type" (and "ts", "id", any fields), on ${natsUrl}`,
);
/** How a command line connects as `user` (with --nats-auth): the password read from the file, not printed. */
const as = (user: keyof NatsUsers): string =>
  users === undefined
    ? ''
    : `NATS_USER=${user} NATS_PASSWORD="$(node -p "require('./.vigil/nats-users.json').${user}")" `;
say(
  `                  e.g. ${as('producer')}npm run pub -- events.c-7 '{"type":"payment","cardId":"c-7","amount":950}'`,
);
say(`change rules:     publish a control message to vigil.control, e.g.`);
say(
  `                  ${as('operator')}npm run pub -- vigil.control '{"op":"pause-rule","id":"big-payment"}'`,
);
say(
  `alerts:           stream ALERTS, subjects alerts.<severity>.<ruleId>; dead letters: stream DLQ, vigil.dlq.<reason>`,
);
say(`metrics:          ${service.url}/metrics   (readiness ${service.url}/readyz)`);
say(`REST API:         ${service.url}/v1 (docs/api.md); CLI: npx vigil rules list`);
say('Ctrl-C stops everything.');

let stopping = false;
function stopEverything(): void {
  if (stopping) return;
  stopping = true;
  say('stopping …');
  void (async () => {
    for (const s of stops) await s();
    for (const c of conns) await c.close();
    await vigil.stop();
    for (const s of servers.reverse()) await s.stop();
    say('stopped');
    process.exit(0);
  })();
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, stopEverything);
void stdoutClosed.then(stopEverything);
