import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { ApiError, ControlLog, ControlWriter } from '../../control-plane/index.js';
import { DEFAULT_LIMITS, type ControlMessage } from '../../rules/index.js';
import { ensureStreams } from '../../service/index.js';
import { startTestServers, type TestServers } from './servers.js';

let servers: TestServers;
const conns: NatsConnection[] = [];
const logs: ControlLog[] = [];

/** One control plane's fold and writer on its own connection, as in another process. */
async function writer(): Promise<{ log: ControlLog; writer: ControlWriter }> {
  const nc = await connect({ servers: servers.nats.url });
  conns.push(nc);
  const js = jetstream(nc);
  const log = new ControlLog(js, await jetstreamManager(nc), DEFAULT_LIMITS);
  await log.start();
  logs.push(log);
  return { log, writer: new ControlWriter(js, log, DEFAULT_LIMITS, 5000) };
}

const upsert = (value: number): ControlMessage => ({
  op: 'upsert-rule',
  rule: { id: 'r', on: ['x'], when: { all: [{ fact: 'a', operator: 'equal', value }] } },
});

beforeAll(async () => {
  servers = await startTestServers({ partitions: 1 });
  await ensureStreams(servers.jsm, 60_000, 1);
});

afterAll(async () => {
  for (const l of logs) await l.stop();
  for (const nc of conns) await nc.close();
  await servers?.stop();
});

describe('compare-and-set on CONTROL across control planes', () => {
  it('lets one of two writers with the same expected version win; JetStream refuses the other, which then sees 409', async () => {
    const a = await writer();
    const b = await writer();
    await a.writer.commit(() => upsert(1), { actor: 'a' });
    await b.log.waitFor(1, 5000);
    const expectV1 = (v: number) => (rs: Parameters<Parameters<ControlWriter['commit']>[0]>[0]) => {
      const current = rs.rules.get('r')?.version;
      if (current !== 1) throw new ApiError('VIGIL_E_CONFLICT', `at ${current}`);
      return upsert(v);
    };
    // Both build against sequence 1 before either publish is answered.
    const results = await Promise.allSettled([
      a.writer.commit(expectV1(2), { actor: 'a' }),
      b.writer.commit(expectV1(3), { actor: 'b' }),
    ]);
    const won = results.filter((r) => r.status === 'fulfilled');
    const lost = results.filter((r) => r.status === 'rejected');
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(1);
    expect((lost[0] as PromiseRejectedResult).reason).toMatchObject({ code: 'VIGIL_E_CONFLICT' });
    expect(a.writer.conflicts + b.writer.conflicts).toBe(1);
    // CONTROL holds exactly the winner: the loser never reached the log.
    expect((await servers.jsm.streams.info('CONTROL')).state.messages).toBe(2);
  });

  it('retries a change that does not conflict after the log moved on', async () => {
    const a = await writer();
    const b = await writer();
    const head = (await servers.jsm.streams.info('CONTROL')).state.last_seq;
    await Promise.all([a.log.waitFor(head, 5000), b.log.waitFor(head, 5000)]);
    const results = await Promise.all([
      a.writer.commit(
        () => ({ op: 'upsert-model', model: { id: 'm1', kind: 'lookup', values: [1] } }),
        { actor: 'a' },
      ),
      b.writer.commit(
        () => ({ op: 'upsert-model', model: { id: 'm2', kind: 'lookup', values: [2] } }),
        { actor: 'b' },
      ),
    ]);
    expect(results.map((r) => r.ok)).toEqual([true, true]);
    expect(a.writer.conflicts + b.writer.conflicts).toBe(1);
    await b.log.waitFor(head + 2, 5000);
    expect([...b.log.ruleSet.models.keys()].sort()).toEqual(['m1', 'm2']);
  });
});
