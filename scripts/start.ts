/**
 * `npm start`: installs what is missing, starts nats-server and redis-server on loopback with data
 * under .vigil/ (unless NATS_URL / REDIS_URL point at servers you run), starts the service, and
 * runs a demo (rules through the control topic, a producer of payment-like events, alerts printed).
 * `npm start -- --no-demo` runs the bare service. `npm start -- --nats-auth` starts nats-server
 * with Vigil's users and permissions (control-plane/nats-auth.example.conf), their passwords made
 * for the session and kept in .vigil/nats-users.json; the service, the demo's producer, its rule
 * publisher and its alert follower each connect as their user.
 *
 * Before it starts anything it checks every port it will listen on (nats-server 4222, redis-server
 * 6379, the service 8080, or what VIGIL_NATS_PORT, VIGIL_REDIS_PORT and VIGIL_HTTP_PORT say) and
 * refuses, one line per port taken, naming the variable that moves it. It writes the API's URL to
 * .vigil/api-url and NATS's to .vigil/nats-url, where the CLI finds them. Ctrl-C, SIGTERM, SIGHUP,
 * a failure at start-up or later, or its output closing: it stops the demo, then the service
 * (last checkpoints, leases released), then the servers it started, and exits.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { ValidationError, VigilError } from '../rules/index.js';
import { resolveOptions, type VigilOptions } from '../service/index.js';
import {
  ensureServersInstalled,
  startNats,
  startRedis,
  type NatsUsers,
  type ServerHandle,
} from './local-servers.js';
import { portRefusals, START_SERVERS, startPorts } from './start-ports.js';
import type { PortPlan, PortUser } from './start-ports.js';
import { followAlerts, publishDemoRules, startDemoProducer } from './demo.js';
import {
  API_ENV,
  resolveControlPlaneOptions,
  type ControlPlaneOptions,
} from '../control-plane/index.js';
import { startVigil, type RunningVigil } from '../app/index.js';

const noDemo = process.argv.includes('--no-demo');
const natsAuth = process.argv.includes('--nats-auth');
const say = (line: string): void => console.log(`[vigil] ${line}`);
const complain = (line: string): void => console.error(`[vigil] ${line}`);

/** Files under .vigil/ where the CLI finds this session's API and NATS (control-plane/cli-client.ts). */
const API_URL_FILE = resolve('.vigil/api-url');
const NATS_URL_FILE = resolve('.vigil/nats-url');

// What is running, to be stopped in the reverse order of starting.
const servers: ServerHandle[] = [];
let vigil: RunningVigil | undefined;
const conns: NatsConnection[] = [];
const demoStops: (() => Promise<void>)[] = [];
const urlFilesWritten: string[] = [];

let stopping = false;
let startup: Promise<void> = Promise.resolve();
let stopRequested: () => void = () => {};
/** Settles when a stop is asked for: start-up steps that wait on the service race it. */
const stopAsked = new Promise<void>((r) => (stopRequested = r));

/** Whether start-up is over (the usage is printed): a failure is no longer one to start. */
let started = false;

/** Says what failed, in a line or a few: the stack only for what is not one of Vigil's errors. */
function report(e: unknown): void {
  const what = started ? 'failed' : 'cannot start';
  if (e instanceof ValidationError) {
    complain(`${what}: ${e.message.replace(/ \(.*$/s, '')}:`);
    for (const p of e.problems) complain(`  ${p.pointer || '/'}: ${p.message}`);
  } else if (e instanceof VigilError) complain(`${what}: ${e.message}`);
  else complain(`${what}: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
}

/**
 * Stops everything that was started, once (later calls do nothing), and exits with `code`. The
 * start-up step in progress finishes first (each is bounded): a server or service half started
 * is stopped too, not left behind.
 */
function stopEverything(code: number): void {
  if (stopping) return;
  stopping = true;
  stopRequested();
  say('stopping …');
  const settled = Promise.race([
    startup.catch(() => {}),
    new Promise((r) => setTimeout(r, 30_000).unref()),
  ]);
  void (async () => {
    await settled;
    for (const s of demoStops) await s().catch(() => {});
    for (const c of conns) await c.close().catch(() => {});
    // The servers stop even if the service's stop failed.
    if (vigil !== undefined)
      await vigil.stop().catch((e: unknown) => {
        report(e);
        code = 1;
      });
    for (const s of servers.reverse()) await s.stop();
    for (const f of urlFilesWritten) rmSync(f, { force: true });
    say('stopped');
    process.exit(code);
  })().catch((e: unknown) => {
    report(e);
    // local-servers stops the servers still running as this process exits.
    process.exit(1);
  });
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const)
  process.on(signal, () => stopEverything(0));
// A write to a closed stdout (`npm start | head`, a terminal gone) would end this script with an
// uncaught EPIPE and leave the servers it started running: it stops everything instead.
process.stdout.on('error', () => stopEverything(0));
process.on('uncaughtException', (e) => {
  report(e);
  stopEverything(1);
});
process.on('unhandledRejection', (e) => {
  report(e);
  stopEverything(1);
});

/** With --nats-auth: a password for each user, made for this session. */
const users: NatsUsers | undefined = natsAuth
  ? {
      vigil: randomBytes(18).toString('base64url'),
      operator: randomBytes(18).toString('base64url'),
      producer: randomBytes(18).toString('base64url'),
      alerts: randomBytes(18).toString('base64url'),
    }
  : undefined;

/** Settings and ports, checked before anything starts: exits 2 with every problem found. */
async function preflight(): Promise<{
  base: VigilOptions;
  api: ControlPlaneOptions;
  plans: PortPlan[];
}> {
  if (natsAuth && process.env.NATS_URL) {
    complain(
      '--nats-auth starts a nats-server of its own with users; with NATS_URL set, give the service its user in NATS_USER and NATS_PASSWORD instead',
    );
    process.exit(2);
  }
  let base: VigilOptions;
  let api: ControlPlaneOptions;
  try {
    base = resolveOptions();
    api = resolveControlPlaneOptions(base);
  } catch (e) {
    report(e);
    process.exit(2);
  }
  const { plans, problems } = startPorts(process.env, {
    startNats: !process.env.NATS_URL,
    startRedis: !process.env.REDIS_URL,
    httpHost: base.httpHost,
    httpPort: base.httpPort,
  });
  const refusals = problems.length > 0 ? problems : await portRefusals(plans);
  if (refusals.length > 0) {
    for (const r of refusals) complain(`cannot start: ${r}`);
    complain('nothing was started');
    process.exit(2);
  }
  return { base, api, plans };
}

async function main(): Promise<void> {
  const { base, api: configuredApi, plans } = await preflight();
  const portOf = (user: PortUser): number => plans.find((p) => p.user === user)?.port ?? 0;
  let natsUrl = process.env.NATS_URL || undefined;
  let redisUrl = process.env.REDIS_URL || undefined;
  if (natsUrl === undefined || redisUrl === undefined) ensureServersInstalled(say);
  if (natsUrl === undefined) {
    const nats = await startNats({
      dataDir: resolve('.vigil/nats'),
      partitions: base.partitions,
      port: portOf(START_SERVERS.nats.user),
      ...(users === undefined ? {} : { users }),
    });
    servers.push(nats);
    natsUrl = nats.url;
    say(`nats-server ${nats.url} (pid ${nats.process.pid}, JetStream data in .vigil/nats)`);
    if (users !== undefined) {
      const file = resolve('.vigil/nats-users.json');
      writeFileSync(file, `${JSON.stringify(users, null, 2)}\n`, { mode: 0o600 });
      // A file left by an earlier session keeps its mode when written over.
      chmodSync(file, 0o600);
      say(
        'NATS users vigil, operator, producer and alerts (permissions of control-plane/nats-auth.example.conf); passwords in .vigil/nats-users.json',
      );
    }
    if (stopping) return;
  }
  if (redisUrl === undefined) {
    const redis = await startRedis({
      dataDir: resolve('.vigil/redis'),
      port: portOf(START_SERVERS.redis.user),
    });
    servers.push(redis);
    redisUrl = redis.url;
    say(`redis-server ${redis.url} (pid ${redis.process.pid}, data in .vigil/redis)`);
    if (stopping) return;
  }
  const options = resolveOptions({
    natsUrl,
    redisUrl,
    ...(users === undefined ? {} : { natsUser: 'vigil', natsPassword: users.vigil }),
  });
  // Without configured tokens, a session admin token in .vigil/api-token (the CLI reads it from there).
  let api = resolveControlPlaneOptions(options);
  mkdirSync(resolve('.vigil'), { recursive: true });
  if (configuredApi.tokens.length === 0) {
    const token = randomBytes(24).toString('hex');
    writeFileSync(resolve('.vigil/api-token'), `${token}\n`, { mode: 0o600 });
    api = resolveControlPlaneOptions(options, {
      tokens: [{ name: 'local-admin', role: 'admin', token }],
    });
    say(`no ${API_ENV.tokens} set: an admin token for this session is in .vigil/api-token`);
  }
  vigil = await startVigil(options, api);
  const service = vigil.service;
  writeUrlFile(API_URL_FILE, service.url);
  writeUrlFile(NATS_URL_FILE, natsUrl);
  await Promise.race([service.whenReady(), stopAsked]);
  if (stopping) return;
  say(
    `service ready: ${options.workers} workers, ${options.partitions} partitions; health ${service.url}/healthz, metrics ${service.url}/metrics`,
  );
  if (!noDemo) await startDemo(natsUrl, options);
  if (stopping) return;
  printUsage(natsUrl, service.url);
  started = true;
}

/** Writes one of the URL files the CLI reads; it is removed again when this session stops. */
function writeUrlFile(file: string, url: string): void {
  writeFileSync(file, `${url}\n`);
  urlFilesWritten.push(file);
}

/** The demo's connection as `user` (with --nats-auth), else as the service connects. */
async function demoConnection(
  natsUrl: string,
  options: VigilOptions,
  user: keyof NatsUsers,
): Promise<NatsConnection> {
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

async function startDemo(natsUrl: string, options: VigilOptions): Promise<void> {
  const operator = await demoConnection(natsUrl, options, 'operator');
  const jsm = await jetstreamManager(operator);
  if ((await jsm.streams.info('CONTROL')).state.last_seq === 0) {
    await publishDemoRules(operator);
    say(
      'demo rules published to vigil.control (big-payment, blocked-card, card-testing, login-then-drain, unconfirmed-order)',
    );
  }
  const follower = await followAlerts(await demoConnection(natsUrl, options, 'alerts'), (a) =>
    say(`ALERT ${a.severity.padEnd(6)} ${a.ruleId.padEnd(18)} ${a.title}`),
  );
  const producer = startDemoProducer(await demoConnection(natsUrl, options, 'producer'));
  demoStops.push(
    () => producer.stop(),
    () => follower.stop(),
  );
  say('demo producer publishing ~20 payment-like events/s');
}

function printUsage(natsUrl: string, url: string): void {
  say('');
  say(
    `publish events:   JetStream publish to events.<key>, a JSON object with "type" (and "ts", "id", any fields), on ${natsUrl}`,
  );
  // `npm run pub` connects to nats://127.0.0.1:4222 unless NATS_URL says otherwise.
  const server = natsUrl === 'nats://127.0.0.1:4222' ? '' : `NATS_URL=${natsUrl} `;
  /** How a command line connects as `user` (with --nats-auth): the password read from the file, not printed. */
  const as = (user: keyof NatsUsers): string =>
    server +
    (users === undefined
      ? ''
      : `NATS_USER=${user} NATS_PASSWORD="$(node -p "require('./.vigil/nats-users.json').${user}")" `);
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
  say(`metrics:          ${url}/metrics   (readiness ${url}/readyz)`);
  say(
    `REST API:         ${url}/v1 (docs/api.md); CLI: npx vigil rules list (URL and token from .vigil/api-url, .vigil/api-token)`,
  );
  say(`home page:        ${url}/`);
  say('Ctrl-C stops everything.');
}

startup = main();
startup.catch((e: unknown) => {
  report(e);
  stopEverything(1);
});
