import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningVigil } from '../../app/index.js';
import type { Alert } from '../../rules/index.js';
import { prng } from '../prng.js';
import { alertsIn, apiClient, startTestVigil, testTokens } from './control-plane-client.js';
import { activated, drained, eventually, startTestServers, type TestServers } from './servers.js';

const P = 3;
const tokens = testTokens();
let servers: TestServers;
let vigil: RunningVigil;
let api: ReturnType<typeof apiClient>;
const W = tokens.write.token;
const R = tokens.read.token;

const big = (value: number) => ({
  on: ['payment'],
  key: 'card',
  when: { all: [{ fact: 'amount', operator: 'greaterThan', value }] },
  alert: { severity: 'high' },
});
const burst = {
  on: ['payment'],
  key: 'card',
  pattern: { kind: 'threshold', aggregate: 'count', window: 1000, operator: '>=', value: 3 },
  alert: { severity: 'medium' },
};

/** Keyed by another field than the partition key (card): through the re-keying hop. */
const merchant = {
  on: ['payment'],
  key: 'merchant',
  pattern: { kind: 'threshold', aggregate: 'count', window: 500, operator: '>=', value: 4 },
  alert: { severity: 'low', suppressFor: 300 },
};

const liveAlerts = (): Promise<Alert[]> => alertsIn(servers);

beforeAll(async () => {
  servers = await startTestServers({ partitions: P });
  vigil = await startTestVigil(servers, Object.values(tokens), {
    workers: 2,
    partitions: P,
    outOfOrderMs: 50,
    tickIntervalMs: 0,
    rekey: 'on',
    partitionKey: 'card',
    rekeyReportMs: 100,
  });
  api = apiClient(`${vigil.url}/v1`);
  // A log with changes in the middle: rules created, tightened, paused, resumed, among events.
  const rnd = prng(5);
  let ts = 1_764_000_000_000;
  const send = async (n: number) => {
    for (let i = 0; i < n; i++) {
      const card = `c${Math.floor(rnd() * 8)}`;
      ts += Math.floor(rnd() * 120);
      await servers.js.publish(
        `events.${card}`,
        JSON.stringify({
          type: 'payment',
          card,
          merchant: `m${Math.floor(rnd() * 3)}`,
          amount: Math.floor(rnd() * 200),
          ts,
          id: `e${ts}`,
        }),
      );
    }
  };
  const change = async (method: string, path: string, body?: unknown) => {
    const r = await api(method, path, { token: W, body });
    expect(r.status).toBeLessThan(300);
  };
  await change('PUT', '/rules/big', big(150));
  await change('PUT', '/rules/burst', burst);
  await change('PUT', '/rules/merchant', merchant);
  await send(60);
  await change('PUT', '/rules/big', big(100));
  await send(60);
  await change('POST', '/rules/burst/pause');
  await send(30);
  await change('POST', '/rules/burst/resume');
  await send(60);
  const seq = (await api('GET', '/rules', { token: R })).body.controlSeq as number;
  await activated(vigil.service, seq, P);
  // The last event pushes every partition's watermark: what stays buffered is the same live and replayed.
  await drained(servers, vigil.service);
});

afterAll(async () => {
  await vigil?.stop();
  await servers?.stop();
});

describe('back-test', () => {
  it('replays the whole log to exactly the alerts the live service produced, publishing nothing', async () => {
    let live: Alert[] = [];
    await eventually(
      async () => {
        const before = live.length;
        live = await liveAlerts();
        return live.length > 0 && live.length === before;
      },
      10_000,
      'the live alerts to settle',
    );
    const counts = async () => [
      (await servers.jsm.streams.info('CONTROL')).state.messages,
      (await servers.jsm.streams.info('ALERTS')).state.messages,
    ];
    const before = await counts();
    const r = await api('POST', '/backtest', {
      token: W,
      body: { wait: true, maxAlerts: 100_000 },
    });
    expect(r.status).toBe(200);
    expect(r.body.status).toBe('done');
    const result = r.body.result;
    expect(result.truncated).toBe(false);
    expect(result.range.fromSeq).toBe(1);
    expect((result.current.list as Alert[]).map((a) => a.id).sort()).toEqual(
      live.map((a) => a.id).sort(),
    );
    expect(result.current.perRule.big).toBeGreaterThan(0);
    expect(result.current.perRule.burst).toBeGreaterThan(0);
    // The re-keyed rule too: the replay runs the hop as the service does.
    expect(result.current.perRule.merchant).toBeGreaterThan(0);
    expect(await counts()).toEqual(before);
  });

  it('compares a candidate with the rules that were in force, per rule and alert by alert', async () => {
    const r = await api('POST', '/backtest', {
      token: W,
      body: {
        wait: true,
        maxAlerts: 100_000,
        candidate: {
          changes: [
            { op: 'upsert-rule', rule: { id: 'big', ...big(50) } },
            { op: 'delete-rule', id: 'burst' },
          ],
        },
      },
    });
    expect(r.status).toBe(200);
    const { current, candidate, diff } = r.body.result;
    expect(candidate.perRule.burst).toBeUndefined();
    expect(diff.partial).toBe(false);
    expect(candidate.perRule.big).toBeGreaterThan(current.perRule.big);
    expect(diff.perRule).toEqual(
      expect.arrayContaining([
        { ruleId: 'big', current: current.perRule.big, candidate: candidate.perRule.big },
        { ruleId: 'burst', current: current.perRule.burst, candidate: 0 },
      ]),
    );
    // Every event the candidate flags but the rules in force did not is one with 50 < amount <= 150.
    expect(diff.onlyCandidate.length).toBeGreaterThan(0);
    // (The candidate holds `merchant` from the first record on; the rules in force got it at its
    // marker, which some partitions met after their first events: its alerts may differ either way.)
    const others = (list: Alert[]): Alert[] => list.filter((a) => a.ruleId !== 'merchant');
    for (const a of others(diff.onlyCandidate)) expect(a.ruleId).toBe('big');
    expect(others(diff.onlyCurrent).every((a) => a.ruleId === 'burst')).toBe(true);
    const bad = await api('POST', '/backtest', {
      token: W,
      body: { candidate: { rules: [{ id: 'x', on: 'payment' }] } },
    });
    expect(bad.status).toBe(422);
    expect(bad.body.error.details.problems[0].pointer).toBe('/candidate/rules/0/on');
  });

  it('replays a range from its markers, runs in the background with progress, and needs write', async () => {
    const head = (await servers.jsm.streams.info('EVENTS')).state.last_seq;
    const from = Math.floor(head / 2);
    const started = await api('POST', '/backtest', {
      token: W,
      body: { from: { seq: from }, maxAlerts: 100_000 },
    });
    expect(started.status).toBe(202);
    expect(started.headers.get('location')).toBe(`/v1/backtest/${started.body.id}`);
    let job = started.body;
    await eventually(
      async () => {
        job = (await api('GET', `/backtest/${started.body.id}`, { token: R })).body;
        return job.status !== 'running';
      },
      20_000,
      'the back-test',
    );
    expect(job.status).toBe('done');
    expect(job.result.range.fromSeq).toBe(from);
    expect(job.progress.read).toBe(job.result.range.records);
    // A stateless rule needs no history before the range: its alerts are exactly the live ones in it.
    const live = (await liveAlerts()).filter(
      (a) => a.ruleId === 'big' && (a.events[0]?.seq ?? 0) >= from,
    );
    const replayed = (job.result.current.list as Alert[]).filter((a) => a.ruleId === 'big');
    expect(replayed.map((a) => a.id).sort()).toEqual(live.map((a) => a.id).sort());
    // Cancelling a finished run changes nothing; an unknown one is 404.
    const del = await api('DELETE', `/backtest/${started.body.id}`, { token: W });
    expect(del.status).toBe(200);
    expect(del.body.status).toBe('done');
    expect((await api('DELETE', '/backtest/nope', { token: W })).status).toBe(404);
    // By store time: from the first record stored at or after that millisecond.
    const at = (await servers.jsm.streams.getMessage('EVENTS', { seq: from }))?.time as Date;
    const byTime = await api('POST', '/backtest', {
      token: W,
      body: { wait: true, from: { time: at.toISOString() }, to: { seq: from + 10 } },
    });
    expect(byTime.status).toBe(200);
    const range = byTime.body.result.range;
    expect(range.fromSeq).toBeLessThanOrEqual(from);
    expect(range.toSeq).toBe(from + 10);
    expect(range.records).toBe(range.toSeq - range.fromSeq + 1);
    const future = await api('POST', '/backtest', {
      token: W,
      body: { wait: true, from: { time: new Date(Date.now() + 3600_000).toISOString() } },
    });
    expect(future.body.result.range.records).toBe(0);
    expect((await api('POST', '/backtest', { token: R, body: {} })).status).toBe(403);
    expect((await api('GET', '/backtest/nope', { token: R })).status).toBe(404);
    expect(
      (await api('POST', '/backtest', { token: W, body: { from: { time: 'yesterday' } } })).status,
    ).toBe(422);
  });
});
