import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startVigil, type RunningVigil } from '../../app/index.js';
import {
  replayMsgId,
  resolveControlPlaneOptions,
  type LetterView,
} from '../../control-plane/index.js';
import { runCli } from '../../control-plane/cli.js';
import { partitionOf } from '../../protocol/index.js';
import { resolveOptions } from '../../service/index.js';
import { alertsIn, apiClient, testTokens } from './control-plane-client.js';
import {
  activated,
  eventually,
  readStream,
  startTestServers,
  type TestServers,
} from './servers.js';

const P = 2;
const tokens = testTokens();
const R = tokens.read.token;
const W = tokens.write.token;
const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'control-plane/vigil.mjs');
const run = promisify(execFile);
let servers: TestServers;
let vigil: RunningVigil;
let api: ReturnType<typeof apiClient>;
let dir: string;
/** What the service logged at info level (the replays are recorded there). */
const logged: string[] = [];

/** A rule that fails on every `probe` event: `in` against a fact that is not a list. */
const fragile = {
  on: ['probe'],
  when: { all: [{ fact: 'a', operator: 'in', value: { fact: 'b' } }] },
  alert: { severity: 'high', title: 'probe {{a}}' },
};
/** The same rule, fixed. */
const fixed = {
  on: ['probe'],
  when: { all: [{ fact: 'a', operator: 'equal', value: 1 }] },
  alert: { severity: 'high', title: 'probe {{a}}' },
};

const letters = async (query = ''): Promise<LetterView[]> => {
  const r = await api('GET', `/dlq${query}`, { token: R });
  expect(r.status).toBe(200);
  return r.body.letters as LetterView[];
};

/** Seqs of the letters of the first test, by reason. */
const seqOf: Record<string, number> = {};

async function vigilBin(
  args: string[],
  token = W,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const env = { ...process.env, VIGIL_URL: vigil.url, VIGIL_TOKEN: token };
  return run(process.execPath, [BIN, ...args], { env, cwd: dir }).then(
    (r) => ({ code: 0, ...r }),
    (e: { code: number; stdout: string; stderr: string }) => e,
  );
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'vigil-dlq-'));
  servers = await startTestServers({ partitions: P });
  const options = resolveOptions(
    {
      natsUrl: servers.nats.url,
      checkpointIntervalMs: 0,
      httpPort: 0,
      workers: 1,
      partitions: P,
      outOfOrderMs: 0,
      tickIntervalMs: 0,
    },
    {},
  );
  vigil = await startVigil(
    options,
    resolveControlPlaneOptions(options, { tokens: Object.values(tokens) }, {}),
    (level, m) => {
      if (level === 'info') logged.push(m);
      else console.log(`[vigil ${level}] ${m}`);
    },
  );
  await vigil.service.whenReady();
  api = apiClient(`${vigil.url}/v1`);
});

afterAll(async () => {
  await vigil?.stop();
  await servers?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('dead letters through the REST API', () => {
  it('lists the letters the service wrote, filtered by reason, rule and range, with previews and payloads', async () => {
    const put = await api('PUT', '/rules/fragile', { token: W, body: fragile });
    expect(put.status).toBe(201);
    await activated(vigil.service, put.body.version as number, P);
    // One at a time: the keys are in different partitions, whose letters may reach DLQ in any order.
    let all: LetterView[] = [];
    for (const [key, payload] of [
      ['k1', 'not json\nat all'],
      ['k2', JSON.stringify({ amount: 5 })],
      // No `ts`: the event's time is its store time, so a replay later is not late.
      ['f0', JSON.stringify({ type: 'probe', a: 1, b: 2 })],
    ] as const) {
      const n = all.length + 1;
      await servers.js.publish(`events.${key}`, payload);
      await eventually(async () => (all = await letters()).length >= n, 30_000, `letter ${n}`);
    }
    expect(all.map((l) => l.reason)).toEqual(['not-json', 'missing-type', 'rule-error']);
    for (const l of all) seqOf[l.reason] = l.seq;
    expect(all.map((l) => l.seq)).toEqual([...all.map((l) => l.seq)].sort((a, b) => a - b));
    const [notJson, , ruleError] = all as [LetterView, LetterView, LetterView];
    expect(notJson).toMatchObject({
      reason: 'not-json',
      preview: 'not json at all',
      size: 15,
      source: { stream: 'EVENTS', subject: `events.k1.${partitionOf('k1', P)}` },
    });
    expect(notJson.error).not.toBe('');
    expect(Date.parse(notJson.time)).toBeGreaterThan(Date.now() - 60_000);
    expect(notJson.payload).toBeUndefined();
    expect(ruleError).toMatchObject({ reason: 'rule-error', rule: 'fragile' });
    expect(ruleError.preview).toBe('{"type":"probe","a":1,"b":2}');

    expect((await letters('?reason=not-json')).map((l) => l.seq)).toEqual([notJson.seq]);
    expect((await letters('?rule=fragile')).map((l) => l.seq)).toEqual([ruleError.seq]);
    expect((await letters(`?since=${seqOf['missing-type']}`)).map((l) => l.reason)).toEqual([
      'missing-type',
      'rule-error',
    ]);
    expect((await letters(`?until=${seqOf['missing-type']}`)).map((l) => l.reason)).toEqual([
      'not-json',
      'missing-type',
    ]);
    expect((await letters(`?since=1h&until=${notJson.time}`)).map((l) => l.seq)).toEqual([
      notJson.seq,
    ]);
    expect(await letters('?since=2099-01-01T00:00:00Z')).toEqual([]);
    // The latest one, and a page from the start with its cursor.
    const latest = await api('GET', '/dlq?limit=1', { token: R });
    expect(latest.body).toMatchObject({ more: true, cursor: ruleError.seq });
    expect(latest.body.letters.map((l: LetterView) => l.seq)).toEqual([ruleError.seq]);
    const first = await api('GET', '/dlq?after=0&limit=2', { token: R });
    expect(first.body).toMatchObject({ more: true, cursor: seqOf['missing-type'] });
    const next = await api('GET', `/dlq?after=${first.body.cursor}&limit=2`, { token: R });
    expect(next.body).toMatchObject({ more: false, cursor: ruleError.seq });
    expect(next.body.letters.map((l: LetterView) => l.seq)).toEqual([ruleError.seq]);

    const [text] = await letters('?reason=not-json&payload=text');
    expect(text).toMatchObject({ payload: 'not json\nat all', encoding: 'text' });
    const [b64] = await letters('?reason=not-json&payload=base64');
    expect(Buffer.from(b64?.payload ?? '', 'base64').toString()).toBe('not json\nat all');

    for (const q of ['?since=yesterday', '?limit=5000', '?wait=100', '?reason=a.b', '?payload=x']) {
      const bad = await api('GET', `/dlq${q}`, { token: R });
      expect(bad.status, q).toBe(400);
      expect(bad.body.error.code).toBe('VIGIL_E_BAD_REQUEST');
    }
    expect((await api('GET', '/dlq')).status).toBe(401);
  });

  it('counts dead letters per reason over a period', async () => {
    const all = await api('GET', '/dlq/stats', { token: R });
    expect(all.status).toBe(200);
    expect(all.body).toMatchObject({
      since: null,
      total: 3,
      reasons: { 'not-json': 1, 'missing-type': 1, 'rule-error': 1 },
    });
    // Read from the start and subtracted from the totals (the shorter side) …
    const fromSecond = await api('GET', `/dlq/stats?since=${seqOf['missing-type']}`, { token: R });
    expect(fromSecond.body).toMatchObject({
      total: 2,
      reasons: { 'missing-type': 1, 'rule-error': 1 },
    });
    expect(fromSecond.body.reasons['not-json']).toBeUndefined();
    // … or read itself.
    const fromThird = await api('GET', `/dlq/stats?since=${seqOf['rule-error']}`, { token: R });
    expect(fromThird.body).toMatchObject({ total: 1, reasons: { 'rule-error': 1 } });
    expect((await api('GET', '/dlq/stats?since=1h', { token: R })).body.total).toBe(3);
    expect((await api('GET', '/dlq/stats?since=2099-01-01', { token: R })).body.total).toBe(0);
    expect((await api('GET', '/dlq/stats?since=soon', { token: R })).status).toBe(400);
  });

  it('follows by long poll: answers when a letter comes, or with none when the wait ends', async () => {
    const cursor = (await api('GET', '/dlq?limit=0', { token: R })).body.cursor as number;
    expect(cursor).toBe(seqOf['rule-error']);
    const t0 = Date.now();
    const empty = await api('GET', `/dlq?after=${cursor}&wait=300`, { token: R });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(290);
    expect(empty.body).toMatchObject({ letters: [], cursor });
    const waiting = api('GET', `/dlq?after=${cursor}&wait=20000&reason=not-json`, { token: R });
    await new Promise((r) => setTimeout(r, 300));
    // A letter of another reason does not end the wait; the one asked for does.
    await servers.js.publish('events.k3', JSON.stringify({ amount: 1 }));
    await new Promise((r) => setTimeout(r, 300));
    const t1 = Date.now();
    await servers.js.publish('events.k3', 'still not json');
    const got = await waiting;
    expect(Date.now() - t1).toBeLessThan(15_000);
    expect(got.body.letters.map((l: LetterView) => l.preview)).toEqual(['still not json']);
    expect(got.body.cursor).toBe(got.body.letters[0].seq);
    // Letters past the cursor that the query cannot take (limit 0; past `until`) end the wait
    // at once rather than being read again and again until the client hangs up.
    const end = (await api('GET', '/dlq?limit=0', { token: R })).body.cursor as number;
    const zero = await api('GET', `/dlq?after=1&limit=0&wait=20000`, { token: R });
    expect(zero.body).toMatchObject({ letters: [], cursor: end });
    const t2 = Date.now();
    const until = await api('GET', `/dlq?after=1&until=1&wait=20000`, { token: R });
    expect(until.body.letters).toEqual([]);
    expect(Date.now() - t2).toBeLessThan(15_000);
  });

  it('replays a fixed letter to its source subject once, records who did it, and refuses what it cannot replay', async () => {
    const seq = seqOf['rule-error'] as number;
    const forbidden = await api('POST', '/dlq/replay', { token: R, body: { seqs: [seq] } });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.error.details).toMatchObject({ needed: 'write', role: 'read' });
    for (const body of [
      {},
      { seqs: [seq], reason: 'late' },
      { seqs: [0] },
      { reason: 'x', limit: 0 },
    ])
      expect((await api('POST', '/dlq/replay', { token: W, body })).status).toBe(400);

    const put = await api('PUT', '/rules/fragile', { token: W, body: fixed });
    await activated(vigil.service, put.body.version as number, P);
    const eventsBefore = (await servers.jsm.streams.info('EVENTS')).state.last_seq;
    const dry = await api('POST', '/dlq/replay', {
      token: W,
      body: { rule: 'fragile', dryRun: true },
    });
    expect(dry.body).toMatchObject({ dryRun: true, selected: 1, wouldReplay: 1, replayed: 0 });
    expect((await servers.jsm.streams.info('EVENTS')).state.last_seq).toBe(eventsBefore);

    const once = await api('POST', '/dlq/replay', { token: W, body: { seqs: [seq] } });
    expect(once.status).toBe(200);
    expect(once.body).toMatchObject({ selected: 1, replayed: 1, duplicates: 0, failed: 0 });
    const stored = await servers.jsm.streams.getMessage('EVENTS', {
      seq: once.body.results[0].eventsSeq,
    });
    expect(stored?.subject).toBe(`events.f0.${partitionOf('f0', P)}`);
    expect(stored?.string()).toBe('{"type":"probe","a":1,"b":2}');
    expect(stored?.header.get('Nats-Msg-Id')).toBe(replayMsgId(seq));
    expect(stored?.header.get('Vigil-Reason')).toBe('');
    // Judged by the fixed rule.
    await eventually(
      async () => (await alertsIn(servers)).some((a) => a.ruleId === 'fragile' && a.key === 'f0'),
      30_000,
      'the alert of the replayed event',
    );
    expect(
      logged.some((m) => /dlq replay by writer .*1 replayed, 0 duplicates, 0 failed/.test(m)),
    ).toBe(true);

    const again = await api('POST', '/dlq/replay', { token: W, body: { seqs: [seq] } });
    expect(again.body).toMatchObject({ replayed: 0, duplicates: 1, failed: 0 });
    expect((await servers.jsm.streams.info('EVENTS')).state.last_seq).toBe(eventsBefore + 1);

    // A rejected control message is not replayed; a sequence DLQ does not hold fails alone.
    await servers.js.publish('vigil.control', '{"op":');
    let control: LetterView[] = [];
    await eventually(
      async () => (control = await letters('?reason=invalid-control')).length === 1,
      30_000,
      'the invalid control letter',
    );
    const mixed = await api('POST', '/dlq/replay', {
      token: W,
      body: { seqs: [control[0]?.seq, 999_999] },
    });
    expect(mixed.body).toMatchObject({ selected: 2, replayed: 0, failed: 2 });
    expect(mixed.body.results[0].error).toMatch(/control message is not replayed/);
    expect(mixed.body.results[1].error).toMatch(/no dead letter at sequence 999999/);
    expect((await readStream(servers, 'CONTROL')).length).toBe(3);
  });
});

describe('vigil dlq and npm run pub --wait-dlq', () => {
  it('shows counts, tails and replays through the vigil bin', async () => {
    const stats = await vigilBin(['dlq', 'stats', '--since', '1h']);
    expect(stats.code).toBe(0);
    expect(stats.stdout).toMatch(/^\d+ dead letters since /);
    expect(stats.stdout).toMatch(/rule-error\s+1/);
    const json = JSON.parse((await vigilBin(['dlq', 'stats', '--json'])).stdout) as {
      total: number;
    };
    expect(json.total).toBeGreaterThanOrEqual(5);

    const tail = await vigilBin(['dlq', 'tail', '--from-start', '--limit', '2'], R);
    expect(tail.code).toBe(0);
    const lines = tail.stdout.trim().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(
      new RegExp(
        `^#${seqOf['not-json']}  \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\dZ  not-json  events\\.k1\\.\\d#\\d+  .+  not json at all$`,
      ),
    );
    const byRule = await vigilBin([
      'dlq',
      'tail',
      '--from-start',
      '--rule',
      'fragile',
      '--limit',
      '1',
      '--json',
    ]);
    expect(JSON.parse(byRule.stdout)).toMatchObject({ reason: 'rule-error', rule: 'fragile' });

    const seq = String(seqOf['rule-error']);
    const dry = await vigilBin(['dlq', 'replay', '--seq', seq, '--dry-run']);
    expect(dry).toMatchObject({ code: 0 });
    expect(dry.stdout).toMatch(/^dry run: 1 of 1 would go back/);
    const again = await vigilBin(['dlq', 'replay', '--seq', seq]);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/^0 of 1 went back to their source subjects; 1 already replayed/);
    const denied = await vigilBin(['dlq', 'replay', '--seq', seq], R);
    expect(denied.code).toBe(3);
    const control = await vigilBin(['dlq', 'replay', '--reason', 'invalid-control']);
    expect(control.code).toBe(1);
    expect(control.stdout).toMatch(
      /0 of 1 went back .* 1 failed\n {2}#\d+ invalid-control: a rejected control message/,
    );
    expect((await vigilBin(['dlq', 'replay'])).code).toBe(2);
  });

  it('follows new dead letters until Ctrl-C', async () => {
    const child = spawn(process.execPath, [BIN, 'dlq', 'tail', '--reason', 'not-json'], {
      env: { ...process.env, VIGIL_URL: vigil.url, VIGIL_TOKEN: R },
      cwd: dir,
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    try {
      // The tail starts at the end of DLQ once it has asked where that is: publish until a
      // letter published after that shows.
      await eventually(
        async () => {
          await servers.js.publish('events.k4', 'tailed');
          await new Promise((r) => setTimeout(r, 300));
          return out.includes('tailed');
        },
        20_000,
        'the tail to print a new letter',
      );
      expect(out).not.toMatch(/not json at all/);
      expect(out.split('\n')[0]).toMatch(
        /^#\d+ {2}.+ {2}not-json {2}events\.k4\.\d#\d+ {2}.+ {2}tailed$/,
      );
      const t = Date.now();
      child.kill('SIGINT');
      expect(await exited).toBe(0);
      expect(Date.now() - t).toBeLessThan(10_000);
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('runs dlq commands in-process too: usage errors before any request', async () => {
    const io = {
      out: () => undefined,
      err: () => undefined,
      env: { VIGIL_URL: vigil.url, VIGIL_TOKEN: W },
      cwd: dir,
    };
    expect(await runCli(['dlq', 'replay', '--seq', '1,x'], io)).toBe(2);
    expect(await runCli(['dlq', 'replay', '--seq', '1', '--reason', 'late'], io)).toBe(2);
    expect(await runCli(['dlq', 'nope'], io)).toBe(2);
    expect(await runCli(['dlq', 'tail', '--limit', '0'], io)).toBe(2);
  });

  it('npm run pub --wait-dlq says whether the message was dead-lettered, and why', async () => {
    const pub = (...args: string[]) =>
      run(process.execPath, ['--import', 'tsx', 'scripts/pub.ts', ...args], {
        cwd: ROOT,
        env: { ...process.env, NATS_URL: servers.nats.url },
      }).then(
        (r) => ({ code: 0, ...r }),
        (e: { code: number; stdout: string; stderr: string }) => e,
      );
    const bad = await pub('events.k5', '{"amount": 3}', '--wait-dlq=10000');
    expect(bad.code).toBe(3);
    expect(bad.stdout).toMatch(
      /^stored in EVENTS at sequence (\d+)\ndead-lettered: missing-type: .+ \(DLQ sequence \d+; once fixed: npx vigil dlq replay --seq \d+\)/,
    );
    const good = await pub('events.k5', '{"type": "payment"}', '--wait-dlq=500');
    expect(good.code).toBe(0);
    expect(good.stdout).toMatch(/not dead-lettered within 500 ms/);
    expect((await pub('events.k5', '{}', '--wait-dlq=soon')).code).toBe(2);
  });
});
