import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { ensureStreams, verifyMapping } from '../../service/index.js';
import { findExecutable, freePort } from '../../scripts/local-servers.js';
import { partitionOf } from '../../protocol/index.js';
import { eventually } from './servers.js';

const P = 16; // the example's mapping
const example = resolve(import.meta.dirname, '../../control-plane/nats-auth.example.conf');
let dir: string;
let child: ChildProcess;
let url: string;
const conns: NatsConnection[] = [];

const passwords: Record<string, string> = {
  vigil: 'change-me-vigil',
  operator: 'change-me-operator',
  producer: 'change-me-producer',
  alerts: 'change-me-alerts',
};

async function as(user: string): Promise<NatsConnection> {
  const nc = await connect({ servers: url, user, pass: passwords[user] });
  // Permission violations arrive as async errors; they must not end the test's connection.
  void (async () => {
    for await (const _ of nc.status()) {
      // drain status events
    }
  })();
  conns.push(nc);
  return nc;
}

async function count(nc: NatsConnection, stream: string, subject?: string): Promise<number> {
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(
    stream,
    subject === undefined ? undefined : { subjects_filter: subject },
  );
  return subject === undefined
    ? info.state.messages
    : Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0);
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'vigil-nats-auth-'));
  const port = await freePort();
  const conf = readFileSync(example, 'utf8')
    .replace(/^port: \d+$/m, `port: ${port}`)
    .replace(
      /^jetstream \{ store_dir: .*\}$/m,
      `jetstream { store_dir: ${JSON.stringify(join(dir, 'js'))} }`,
    );
  expect(conf).toContain(`port: ${port}`);
  writeFileSync(join(dir, 'nats.conf'), conf);
  child = spawn(findExecutable('nats-server') ?? 'nats-server', ['-c', join(dir, 'nats.conf')], {
    stdio: 'ignore',
  });
  url = `nats://127.0.0.1:${port}`;
  await eventually(
    async () => {
      try {
        await (
          await connect({ servers: url, user: 'vigil', pass: passwords.vigil, reconnect: false })
        ).close();
        return true;
      } catch {
        return false;
      }
    },
    20_000,
    'nats-server with the example config',
  );
  const vigil = await as('vigil');
  await ensureStreams(await jetstreamManager(vigil), 120_000, P);
  await verifyMapping(vigil, P);
});

afterAll(async () => {
  for (const nc of conns) await nc.close().catch(() => undefined);
  if (child && child.exitCode === null) {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('the example NATS permissions', () => {
  it('let a producer publish events, and refuse its control messages, epoch markers and ticks', async () => {
    const vigil = await as('vigil');
    const producer = jetstream(await as('producer'));
    const ack = await producer.publish('events.k3', JSON.stringify({ type: 'payment' }));
    const stored = await (
      await jetstreamManager(vigil)
    ).streams.getMessage('EVENTS', { seq: ack.seq });
    expect(stored?.subject).toBe(`events.k3.${partitionOf('k3', P)}`);
    const refused = async (subject: string, body: unknown) => {
      await expect(
        producer.publish(subject, JSON.stringify(body), { timeout: 1000 }),
      ).rejects.toThrow();
    };
    await refused('vigil.control', { op: 'delete-rule', id: 'big' });
    await refused('events._vigil', { vigil: 'epoch', controlSeq: 1 });
    await refused('events._vigil.3', { vigil: 'epoch', controlSeq: 1 });
    await refused('events._tick.3', { vigil: 'tick', ts: Date.now() });
    // Nor the service's start-up probes (events._probe, events._probe1 … events._probe15), which
    // a producer could otherwise forge to mislead the mapping check. The service's own probes
    // from beforeAll are in EVENTS already: none may be added.
    const probeCount = async () => {
      let n = 0;
      for (let i = 0; i < 16; i++)
        n += await count(vigil, 'EVENTS', `events._probe${i === 0 ? '' : i}.*`);
      return n;
    };
    const before = await probeCount();
    expect(before).toBeGreaterThan(0);
    for (const key of ['_probe', '_probe1', '_probe7', '_probe15'])
      await refused(`events.${key}`, {});
    expect(await probeCount()).toBe(before);
    // Nor may it use the JetStream API, e.g. to purge a stream.
    await expect(
      jetstreamManager(await as('producer'), { timeout: 1000 }).then((m) =>
        m.streams.purge('EVENTS'),
      ),
    ).rejects.toThrow();
    expect(await count(vigil, 'CONTROL')).toBe(0);
    expect(await count(vigil, 'EVENTS', 'events._vigil.*')).toBe(0);
    expect(await count(vigil, 'EVENTS', 'events._tick.*')).toBe(0);
    expect(await count(vigil, 'EVENTS', 'events.k3.*')).toBe(1);
    // The same publishes succeed for the service's own user: the refusals above are the permissions.
    await jetstream(vigil).publish(
      'events._vigil',
      JSON.stringify({ vigil: 'epoch', controlSeq: 1 }),
    );
    expect(await count(vigil, 'EVENTS', 'events._vigil.*')).toBe(1);
  });

  it('let operators publish control messages and read CONTROL, and alert consumers only read ALERTS', async () => {
    const vigil = await as('vigil');
    const operator = jetstream(await as('operator'));
    const { seq } = await operator.publish('vigil.control', JSON.stringify({ op: 'clear-state' }));
    expect(seq).toBe(1);
    const control = await (await operator.consumers.get('CONTROL')).next({ expires: 2000 });
    expect(control?.seq).toBe(1);
    await expect(
      operator.publish('events.k4', '{"type":"x"}', { timeout: 1000 }),
    ).rejects.toThrow();

    await jetstream(vigil).publish('alerts.high.big', JSON.stringify({ id: 'a1', ruleId: 'big' }), {
      msgID: 'a1',
    });
    const alerts = jetstream(await as('alerts'));
    const alert = await (await alerts.consumers.get('ALERTS')).next({ expires: 2000 });
    expect(alert?.json<{ id: string }>().id).toBe('a1');
    await expect(
      alerts.publish('vigil.control', '{"op":"clear-state"}', { timeout: 1000 }),
    ).rejects.toThrow();
    await expect(alerts.publish('alerts.high.big', '{}', { timeout: 1000 })).rejects.toThrow();
    await expect(
      alerts.consumers.get('CONTROL').then((c) => c.next({ expires: 1000 })),
    ).rejects.toThrow();
    expect(await count(vigil, 'CONTROL')).toBe(1);
    expect(await count(vigil, 'ALERTS')).toBe(1);
  });
});
