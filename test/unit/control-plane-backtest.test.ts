import type { AddressInfo } from 'node:net';
import express from 'express';
import { describe, expect, it } from 'vitest';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { ApiContext } from '../../control-plane/context.js';
import { errorHandler } from '../../control-plane/http-support.js';
import type { ControlPlaneOptions } from '../../control-plane/options.js';
import { mountBacktestRoutes } from '../../control-plane/routes-backtest.js';
import { BacktestJobs, type BacktestResult } from '../../control-plane/backtest.js';
import { Replay } from '../../control-plane/replay.js';
import { foldVersions } from '../../protocol/index.js';
import { applyControl, DEFAULT_LIMITS, emptyRuleSet } from '../../rules/index.js';
import { partitionOf } from '../../protocol/index.js';

const enc = new TextEncoder();
const msg = (seq: number, subject: string, body: unknown, storedAt = 1000 + seq) => ({
  seq,
  subject,
  data: enc.encode(typeof body === 'string' ? body : JSON.stringify(body)),
  storedAt,
});
const rule = (value: number) => ({
  op: 'upsert-rule',
  rule: {
    id: 'big',
    on: ['pay'],
    when: { all: [{ fact: 'amount', operator: 'greaterThan', value }] },
  },
});

describe('Replay', () => {
  const P = 4;
  const key = 'k1';
  const p = partitionOf(key, P);
  const versions = foldVersions(
    [
      { seq: 1, data: enc.encode(JSON.stringify(rule(100))) },
      { seq: 2, data: enc.encode('{"op":') },
      { seq: 3, data: enc.encode(JSON.stringify(rule(10))) },
    ],
    DEFAULT_LIMITS,
  );

  it('folds CONTROL as the shards do: a message that is not JSON keeps the rules and advances the sequence', () => {
    expect(versions.get(2)?.rules.get('big')?.version).toBe(1);
    expect(versions.get(2)?.controlSeq).toBe(2);
    expect(versions.get(3)?.rules.get('big')?.version).toBe(3);
  });

  it('switches rule sets at markers, and skips what a partition runner skips', () => {
    const r = new Replay({ kind: 'history', versions }, P, 0, DEFAULT_LIMITS);
    const fired = (m: ReturnType<typeof msg>) =>
      r.feed(m).map((a) => `${a.ruleVersion}:${a.events[0]?.seq}`);
    expect(fired(msg(1, `events._vigil.${p}`, { vigil: 'epoch', controlSeq: 1 }))).toEqual([]);
    expect(fired(msg(2, `events.${key}.${p}`, { type: 'pay', amount: 50 }))).toEqual([]);
    expect(fired(msg(3, `events.${key}.${p}`, { type: 'pay', amount: 500 }))).toEqual(['1:3']);
    expect(fired(msg(4, `events._vigil.${p}`, { vigil: 'epoch', controlSeq: 3 }))).toEqual([]);
    expect(fired(msg(5, `events.${key}.${p}`, { type: 'pay', amount: 50 }))).toEqual(['3:5']);
    // An older or unknown marker, a wrong partition, reserved keys and probes change nothing.
    expect(fired(msg(6, `events._vigil.${p}`, { vigil: 'epoch', controlSeq: 1 }))).toEqual([]);
    expect(fired(msg(7, `events._vigil.${p}`, { vigil: 'epoch', controlSeq: 99 }))).toEqual([]);
    expect(fired(msg(8, `events.${key}.${(p + 1) % P}`, { type: 'pay', amount: 500 }))).toEqual([]);
    expect(fired(msg(9, `events._probe3.${p}`, { type: 'pay', amount: 500 }))).toEqual([]);
    expect(fired(msg(10, `events._secret.${p}`, { type: 'pay', amount: 500 }))).toEqual([]);
    expect(fired(msg(11, `events.${key}.${p}`, { type: 'pay', amount: 20 }))).toEqual(['3:11']);
  });

  it('judges every event by a candidate, ignoring markers', () => {
    const candidate = applyControl(emptyRuleSet(), rule(30), 1).ruleSet;
    const r = new Replay({ kind: 'candidate', ruleSet: candidate }, P, 0, DEFAULT_LIMITS);
    expect(r.feed(msg(1, `events._vigil.${p}`, { vigil: 'epoch', controlSeq: 3 }))).toEqual([]);
    expect(r.feed(msg(2, `events.${key}.${p}`, { type: 'pay', amount: 20 }))).toEqual([]);
    expect(r.feed(msg(3, `events.${key}.${p}`, { type: 'pay', amount: 40 }))).toHaveLength(1);
  });
});

describe('BacktestJobs', () => {
  const result: BacktestResult = {
    range: { fromSeq: 1, toSeq: 1, records: 1 },
    truncated: false,
    current: { alerts: 0, perRule: {}, list: [] },
  };

  it('reports progress while a run goes on, its result when it ends, and cancels through the signal', async () => {
    const jobs = new BacktestJobs();
    let release: () => void = () => undefined;
    const job = jobs.start(async (progress) => {
      progress({ read: 5, total: 10, lastSeq: 5 });
      await new Promise<void>((r) => (release = r));
      return result;
    });
    expect(jobs.running).toBe(true);
    expect(job.progress).toEqual({ read: 5, total: 10, lastSeq: 5 });
    release();
    await job.done;
    expect(job.status).toBe('done');
    expect(job.result).toBe(result);
    expect(jobs.running).toBe(false);

    const cancelled = jobs.start(
      (_progress, signal) =>
        new Promise((_, reject) =>
          signal.addEventListener('abort', () => reject(new Error('cancelled'))),
        ),
    );
    cancelled.abort.abort();
    await cancelled.done;
    expect(cancelled.status).toBe('cancelled');
    const failed = jobs.start(() => Promise.reject(new Error('boom')));
    await failed.done;
    expect(failed).toMatchObject({ status: 'failed', error: 'boom' });
    expect(jobs.get(job.id)).toBe(job);
  });

  it('keeps only the last finished jobs', async () => {
    const jobs = new BacktestJobs(2);
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const j = jobs.start(() => Promise.resolve(result));
      await j.done;
      ids.push(j.id);
    }
    expect(ids.map((id) => jobs.get(id) !== undefined)).toEqual([false, false, true, true]);
  });
});

describe('POST /v1/backtest with "wait": true', () => {
  /** The back-test routes on a server whose EVENTS info waits until the test settles it. */
  async function server() {
    let settle: (e: Error) => void = () => undefined;
    const jsm = {
      streams: { info: () => new Promise((_, reject) => (settle = reject)) },
    } as unknown as JetStreamManager;
    const ctx = {
      options: {
        partitions: 1,
        outOfOrderMs: 0,
        limits: DEFAULT_LIMITS,
        maxBacktestRecords: 10,
      } as unknown as ControlPlaneOptions,
      js: () => ({}) as JetStreamClient,
      jsm: () => jsm,
    } as unknown as ApiContext;
    const app = express();
    app.use(express.json());
    app.use((_req, res, next) => {
      res.locals.principal = { name: 't', role: 'write' };
      next();
    });
    const router = express.Router();
    const jobs = mountBacktestRoutes(router, ctx);
    app.use(router);
    app.use(errorHandler(() => undefined));
    const http = app.listen(0, '127.0.0.1');
    await new Promise((r) => http.once('listening', r));
    const { port } = http.address() as AddressInfo;
    const answer = fetch(`http://127.0.0.1:${port}/backtest`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ wait: true }),
    }).then(async (r) => ({
      status: r.status,
      body: (await r.json()) as { error: { code: string; message: string; details: unknown } },
    }));
    // The run has started once the route asked for EVENTS' info.
    while (!jobs.running) await new Promise((r) => setTimeout(r, 5));
    return { jobs, answer, settle: (e: Error) => settle(e), close: () => http.close() };
  }

  it('answers a failed run with 500 in the error shape, the job in details', async () => {
    const s = await server();
    s.settle(new Error('EVENTS is gone'));
    const r = await s.answer;
    s.close();
    expect(r.status).toBe(500);
    expect(r.body.error).toMatchObject({
      code: 'VIGIL_E_INTERNAL',
      details: { job: { status: 'failed', error: 'EVENTS is gone' } },
    });
    expect(r.body.error.message).toMatch(/EVENTS is gone/);
  });

  it('answers a cancelled run with 409 VIGIL_E_BACKTEST_CANCELLED, the job in details', async () => {
    const s = await server();
    s.jobs.cancelAll();
    s.settle(new Error('cancelled'));
    const r = await s.answer;
    s.close();
    expect(r.status).toBe(409);
    expect(r.body.error).toMatchObject({
      code: 'VIGIL_E_BACKTEST_CANCELLED',
      details: { job: { status: 'cancelled' } },
    });
  });
});
