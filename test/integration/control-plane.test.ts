import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createControlPlane,
  OPENAPI,
  resolveControlPlaneOptions,
  SECURITY_HEADERS,
} from '../../control-plane/index.js';
import type { RunningVigil } from '../../app/index.js';
import { DEFAULT_LIMITS, type Alert } from '../../rules/index.js';
import { alertsIn, apiClient, startTestVigil, testTokens } from './control-plane-client.js';
import {
  activated,
  drained,
  eventually,
  readStream,
  startTestServers,
  type TestServers,
} from './servers.js';

const P = 2;
const tokens = testTokens();
let servers: TestServers;
let vigil: RunningVigil;
let api: ReturnType<typeof apiClient>;
const R = tokens.read.token;
const W = tokens.write.token;
const A = tokens.admin.token;

const bigRule = (value: number) => ({
  on: ['payment'],
  key: 'card',
  when: { all: [{ fact: 'amount', operator: 'greaterThan', value }] },
  alert: { severity: 'high', title: 'big payment on {{card}}' },
});

const alerts = (): Promise<Alert[]> => alertsIn(servers);

async function controlMessages(): Promise<Record<string, unknown>[]> {
  return (await readStream(servers, 'CONTROL')).map(
    (m) => JSON.parse(new TextDecoder().decode(m.data)) as Record<string, unknown>,
  );
}

beforeAll(async () => {
  servers = await startTestServers({ partitions: P });
  vigil = await startTestVigil(
    servers,
    [tokens.read, tokens.write, tokens.admin],
    { workers: 2, partitions: P, outOfOrderMs: 0, tickIntervalMs: 200 },
    { maxModelBytes: 64 * 1024 },
  );
  api = apiClient(`${vigil.url}/v1`);
});

afterAll(async () => {
  await vigil?.stop();
  await servers?.stop();
});

describe('REST API: auth, headers, errors', () => {
  it('refuses requests without a valid token (401) and with too small a role (403), in one error shape', async () => {
    const none = await api('GET', '/rules');
    expect(none.status).toBe(401);
    expect(none.body.error).toMatchObject({ code: 'VIGIL_E_UNAUTHORIZED' });
    expect(none.body.error.message).toMatch(/Bearer/);
    const bad = await api('GET', '/rules', { token: `${R}x` });
    expect(bad.status).toBe(401);
    expect(bad.body.error.message).toMatch(/not valid/);
    const forbidden = await api('PUT', '/rules/r1', { token: R, body: bigRule(1) });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.error).toMatchObject({
      code: 'VIGIL_E_FORBIDDEN',
      details: { needed: 'write', role: 'read' },
    });
    const adminOnly = await api('POST', '/changesets', {
      token: W,
      body: { changes: [{ op: 'clear-state' }] },
    });
    expect(adminOnly.status).toBe(403);
    expect((await api('GET', '/rules', { token: R })).status).toBe(200);
  });

  it('sets security headers and a request id, and answers unknown routes and bad bodies with the error shape', async () => {
    const r = await api('GET', '/nope', { token: R, headers: { 'x-request-id': 'req-42' } });
    expect(r.status).toBe(404);
    expect(r.body.error.code).toBe('VIGIL_E_NOT_FOUND');
    expect(r.headers.get('x-request-id')).toBe('req-42');
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) expect(r.headers.get(k)).toBe(v);
    expect(r.headers.get('x-powered-by')).toBeNull();
    const notJson = await api('PUT', '/rules/r1', {
      token: W,
      raw: '{"on": [',
      headers: { 'content-type': 'application/json' },
    });
    expect(notJson.status).toBe(400);
    expect(notJson.body.error.code).toBe('VIGIL_E_BAD_REQUEST');
    expect(JSON.stringify(notJson.body)).not.toMatch(/at .*\.js|node_modules/);
    const text = await api('PUT', '/rules/r1', {
      token: W,
      raw: 'on',
      headers: { 'content-type': 'text/plain' },
    });
    expect(text.status).toBe(415);
    const huge = await api('PUT', '/rules/r1', {
      token: W,
      body: { ...bigRule(1), description: 'x'.repeat(1_100_000) },
    });
    expect(huge.status).toBe(413);
    expect(huge.body.error.code).toBe('VIGIL_E_TOO_LARGE');
  });

  it('answers a path that is not valid percent-encoding with 400, and a body in a charset it cannot read with 415', async () => {
    const path = await api('GET', '/rules/%E0%A4%A', { token: R });
    expect(path.status).toBe(400);
    expect(path.body.error.code).toBe('VIGIL_E_BAD_REQUEST');
    const charset = await api('PUT', '/rules/r1', {
      token: W,
      raw: JSON.stringify(bigRule(1)),
      headers: { 'content-type': 'application/json; charset=koi8-r' },
    });
    expect(charset.status).toBe(415);
    expect(charset.body.error.code).toBe('VIGIL_E_UNSUPPORTED_MEDIA');
  });

  it('reads at most the small body limit for a read token, even on PUT /models/:id', async () => {
    // This server's model limit (64 KiB) is below the body limit (1 MiB): a 100 KB body is over
    // the one a writer gets there, but within the one a read token gets, so it reaches the 403.
    const r = await api('PUT', '/models/m-read', {
      token: R,
      body: { kind: 'lookup', values: ['x'.repeat(100_000)] },
    });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('VIGIL_E_FORBIDDEN');
    const w = await api('PUT', '/models/m-read', {
      token: W,
      body: { kind: 'lookup', values: ['x'.repeat(100_000)] },
    });
    expect(w.status).toBe(413);
  });
});

describe('REST API: start-up', () => {
  it('answers 503 in the error shape until it has read CONTROL', async () => {
    const express = (await import('express')).default;
    const cp = createControlPlane(
      resolveControlPlaneOptions(
        { natsUrl: servers.nats.url, limits: DEFAULT_LIMITS, partitions: P, outOfOrderMs: 0 },
        { tokens: [tokens.read] },
        {},
      ),
    );
    const app = express();
    cp.routes(app, vigil.service.pool);
    const server = app.listen(0, '127.0.0.1');
    await new Promise((r) => server.once('listening', r));
    try {
      const port = (server.address() as { port: number }).port;
      const r = await apiClient(`http://127.0.0.1:${port}/v1`)('GET', '/rules', { token: R });
      expect(r.status).toBe(503);
      expect(r.body.error).toMatchObject({ code: 'VIGIL_E_UNAVAILABLE' });
      await cp.start();
      const after = await apiClient(`http://127.0.0.1:${port}/v1`)('GET', '/rules', { token: R });
      expect(after.status).toBe(200);
    } finally {
      await cp.stop();
      await new Promise((r) => server.close(r));
    }
  });
});

describe('REST API: rules', () => {
  it('creates, reads, lists, replaces with optimistic concurrency, and records who, why and which request', async () => {
    const created = await api('PUT', '/rules/big', {
      token: W,
      body: bigRule(100),
      headers: { 'x-vigil-reason': 'first version', 'x-request-id': 'req-create-big' },
    });
    expect(created.status).toBe(201);
    const v1 = created.body.version as number;
    expect(created.body).toMatchObject({ id: 'big', state: 'active', rule: { id: 'big' } });
    expect(created.body.change).toMatchObject({
      seq: v1,
      actor: 'writer',
      reason: 'first version',
      requestId: 'req-create-big',
    });
    expect(created.headers.get('etag')).toBe(`"${v1}"`);
    const stored = (await controlMessages()).at(-1);
    expect(stored).toMatchObject({
      op: 'upsert-rule',
      meta: { actor: 'writer', reason: 'first version', requestId: 'req-create-big' },
    });

    const got = await api('GET', '/rules/big', { token: R });
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({
      id: 'big',
      version: v1,
      lastChange: { seq: v1, actor: 'writer' },
    });
    const list = await api('GET', '/rules', { token: R });
    expect(list.body.rules.map((r: { id: string }) => r.id)).toContain('big');

    const stale = await api('PUT', '/rules/big', {
      token: W,
      body: bigRule(90),
      headers: { 'if-match': `"${v1 - 1}"` },
    });
    expect(stale.status).toBe(409);
    expect(stale.body.error.details).toMatchObject({ currentVersion: v1, expectedVersion: v1 - 1 });
    const mustNotExist = await api('PUT', '/rules/big', {
      token: W,
      body: { rule: bigRule(90), expectedVersion: 0 },
    });
    expect(mustNotExist.status).toBe(409);

    const replaced = await api('PUT', '/rules/big', {
      token: W,
      body: { rule: bigRule(90), expectedVersion: v1, reason: 'lower threshold' },
    });
    expect(replaced.status).toBe(200);
    expect(replaced.body.version).toBeGreaterThan(v1);
    expect(replaced.body.change.changes).toEqual([{ ruleId: 'big', action: 'kept' }]);
  });

  it('answers If-Match: * with 412 when the rule does not exist, and applies it when it does', async () => {
    const missing = await api('PUT', '/rules/star', {
      token: W,
      body: bigRule(5),
      headers: { 'if-match': '*' },
    });
    expect(missing.status).toBe(412);
    expect(missing.body.error.code).toBe('VIGIL_E_PRECONDITION_FAILED');
    expect((await api('GET', '/rules/star', { token: R })).status).toBe(404);
    expect((await api('PUT', '/rules/star', { token: W, body: bigRule(5) })).status).toBe(201);
    const present = await api('PUT', '/rules/star', {
      token: W,
      body: bigRule(6),
      headers: { 'if-match': '*' },
    });
    expect(present.status).toBe(200);
  });

  it('detects a change published straight to vigil.control between read and write (compare-and-set on CONTROL)', async () => {
    const before = (await api('GET', '/rules/big', { token: R })).body.version as number;
    await servers.js.publish(
      'vigil.control',
      JSON.stringify({ op: 'upsert-rule', rule: { id: 'big', ...bigRule(95) } }),
    );
    const r = await api('PUT', '/rules/big', {
      token: W,
      body: bigRule(80),
      headers: { 'if-match': `"${before}"` },
    });
    expect(r.status).toBe(409);
    expect(r.body.error.details.currentVersion).toBeGreaterThan(before);
  });

  it('lets exactly one of two concurrent writers with the same expected version win', async () => {
    const v = (await api('GET', '/rules/big', { token: R })).body.version as number;
    const [a, b] = await Promise.all([
      api('PUT', '/rules/big', { token: W, body: bigRule(91), headers: { 'if-match': `"${v}"` } }),
      api('PUT', '/rules/big', { token: W, body: bigRule(92), headers: { 'if-match': `"${v}"` } }),
    ]);
    expect([a.status, b.status].sort()).toEqual([200, 409]);
  });

  it('refuses an invalid rule with 422 and every problem, publishing nothing; validate says the same without publishing', async () => {
    const head = (await servers.jsm.streams.info('CONTROL')).state.last_seq;
    const bad = {
      on: 'payment',
      when: { all: [{ fact: 'amount', operator: 'biggerThan', value: 1 }] },
      alert: { severity: 'HIGH!' },
    };
    const r = await api('PUT', '/rules/broken', { token: W, body: bad });
    expect(r.status).toBe(422);
    expect(r.body.error.code).toBe('VIGIL_E_VALIDATION');
    const pointers = (r.body.error.details.problems as { pointer: string; message: string }[]).map(
      (p) => p.pointer,
    );
    expect(pointers).toEqual(expect.arrayContaining(['/rule/on', '/rule/when/all/0/operator']));
    for (const p of r.body.error.details.problems) expect(p.message.length).toBeGreaterThan(10);
    const wrongId = await api('PUT', '/rules/broken', {
      token: W,
      body: { ...bigRule(1), id: 'other' },
    });
    expect(wrongId.status).toBe(422);
    expect(wrongId.body.error.details.problems[0].pointer).toBe('/id');
    const v = await api('POST', '/rules/validate', { token: R, body: { id: 'broken', ...bad } });
    expect(v.status).toBe(422);
    expect(v.body.error.details.problems).toEqual(r.body.error.details.problems);
    const good = await api('POST', '/rules/validate', {
      token: R,
      body: { id: 'fresh', ...bigRule(5) },
    });
    expect(good.status).toBe(200);
    expect(good.body).toMatchObject({
      valid: true,
      changes: [{ ruleId: 'fresh', action: 'created' }],
      warnings: [],
    });
    expect(good.body.sample.events).toBeGreaterThanOrEqual(0);
    expect(
      (await api('POST', '/rules/validate?sample=x', { token: R, body: bigRule(5) })).status,
    ).toBe(400);
    // Sampling EVENTS leaves no consumer behind on the server.
    const consumers = async () => (await servers.jsm.streams.info('EVENTS')).state.consumer_count;
    const before = await consumers();
    for (let i = 0; i < 3; i++)
      expect(
        (await api('POST', '/rules/validate', { token: R, body: { id: 'fresh', ...bigRule(5) } }))
          .status,
      ).toBe(200);
    expect(await consumers()).toBe(before);
    const msg = await api('POST', '/rules/validate', {
      token: R,
      body: { message: { op: 'delete-rule', id: 'nope' } },
    });
    expect(msg.status).toBe(422);
    expect((await servers.jsm.streams.info('CONTROL')).state.last_seq).toBe(head);
    expect((await api('GET', '/rules/broken', { token: R })).status).toBe(404);
  });

  it('pauses, resumes and deletes, with history, diffs and 404s', async () => {
    await api('PUT', '/rules/tmp', { token: W, body: bigRule(1) });
    const paused = await api('POST', '/rules/tmp/pause', {
      token: W,
      headers: { 'x-vigil-reason': 'noisy' },
    });
    expect(paused.status).toBe(200);
    expect(paused.body.state).toBe('paused');
    expect(
      (await api('GET', '/rules', { token: R })).body.rules.find(
        (r: { id: string }) => r.id === 'tmp',
      ).state,
    ).toBe('paused');
    expect((await api('POST', '/rules/tmp/resume', { token: W })).body.state).toBe('active');
    await api('PUT', '/rules/tmp', {
      token: W,
      body: { ...bigRule(2), alert: { severity: 'low' } },
    });
    const del = await api('DELETE', '/rules/tmp', {
      token: W,
      headers: { 'x-vigil-reason': 'done' },
    });
    expect(del.status).toBe(200);
    expect(del.body).toMatchObject({ id: 'tmp', deleted: true });
    expect((await api('GET', '/rules/tmp', { token: R })).status).toBe(404);
    expect((await api('DELETE', '/rules/tmp', { token: W })).status).toBe(404);
    expect((await api('POST', '/rules/tmp/pause', { token: W })).status).toBe(404);
    const h = await api('GET', '/rules/tmp/history', { token: R });
    expect(h.status).toBe(200);
    const revs = h.body.revisions as {
      action: string;
      state: string;
      actor: string;
      reason?: string;
      diff: { op: string; path: string }[];
    }[];
    expect(revs.map((x) => x.action)).toEqual(['created', 'paused', 'resumed', 'kept', 'dropped']);
    expect(revs.map((x) => x.state)).toEqual(['active', 'paused', 'active', 'active', 'deleted']);
    expect(revs[1]).toMatchObject({ actor: 'writer', reason: 'noisy', diff: [] });
    expect(revs[3]?.diff).toEqual(
      expect.arrayContaining([
        { op: 'replace', path: '/when/all/0/value', before: 1, after: 2 },
        { op: 'replace', path: '/alert/severity', before: 'high', after: 'low' },
      ]),
    );
    expect(revs[4]?.diff[0]).toMatchObject({ op: 'remove', path: '' });
    expect((await api('GET', '/rules/never/history', { token: R })).status).toBe(404);
    const audit = await api('GET', '/control?after=0&limit=1000', { token: R });
    expect(
      audit.body.changes.some(
        (c: { op: string; reason?: string }) => c.op === 'delete-rule' && c.reason === 'done',
      ),
    ).toBe(true);
  });

  it('rolls back to an earlier version, and alerts follow the old definition again', async () => {
    const v1 = (await api('PUT', '/rules/roll', { token: W, body: bigRule(100) })).body
      .version as number;
    const v2 = (await api('PUT', '/rules/roll', { token: W, body: bigRule(50) })).body
      .version as number;
    const diff = await api('GET', `/rules/roll/diff?from=${v1}&to=${v2}`, { token: R });
    expect(diff.body.diff).toEqual([
      { op: 'replace', path: '/when/all/0/value', before: 100, after: 50 },
    ]);
    await activated(vigil.service, v2, P);
    const send = (id: string, amount: number) =>
      servers.js.publish(
        `events.k${amount}`,
        JSON.stringify({ type: 'payment', card: `k${amount}`, amount, id }),
      );
    await send('under-v2', 70);
    const rb = await api('POST', '/rules/roll/rollback', {
      token: W,
      body: { version: v1, expectedVersion: v2 },
    });
    expect(rb.status).toBe(200);
    const v3 = rb.body.version as number;
    expect(v3).toBeGreaterThan(v2);
    expect(rb.body.rule).toEqual({ id: 'roll', ...bigRule(100) });
    expect(rb.body.change.reason).toBe(`rollback to version ${v1}`);
    await activated(vigil.service, v3, P);
    await send('under-v3-small', 70);
    await send('under-v3-big', 150);
    await drained(servers, vigil.service);
    let mine: Alert[] = [];
    await eventually(
      async () => {
        mine = (await alerts()).filter((a) => a.ruleId === 'roll');
        return mine.length >= 2;
      },
      10_000,
      'the alerts of rule roll',
    );
    expect(
      mine
        .map(
          (a) =>
            `${a.events[0]?.id}@${a.ruleVersion === v2 ? 'v2' : a.ruleVersion === v3 ? 'v3' : a.ruleVersion}`,
        )
        .sort(),
    ).toEqual(['under-v2@v2', 'under-v3-big@v3']);
    expect(
      (await api('POST', '/rules/roll/rollback', { token: W, body: { version: 999_999 } })).status,
    ).toBe(404);
    const stale = await api('POST', '/rules/roll/rollback', {
      token: W,
      body: { version: v1, expectedVersion: v2 },
    });
    expect(stale.status).toBe(409);
  });

  it('applies a changeset atomically: all or nothing', async () => {
    const r = await api('POST', '/changesets', {
      token: W,
      body: {
        reason: 'two at once',
        changes: [
          { op: 'upsert-rule', rule: { id: 'cs1', ...bigRule(1) } },
          { op: 'upsert-rule', rule: { id: 'cs2', ...bigRule(2) }, expectedVersion: 0 },
        ],
      },
    });
    expect(r.status).toBe(200);
    expect(r.body.change).toMatchObject({ op: 'changeset', reason: 'two at once', ok: true });
    const list = (await api('GET', '/rules', { token: R })).body.rules.map(
      (x: { id: string }) => x.id,
    );
    expect(list).toEqual(expect.arrayContaining(['cs1', 'cs2']));
    const bad = await api('POST', '/changesets', {
      token: W,
      body: {
        changes: [
          { op: 'delete-rule', id: 'cs1' },
          { op: 'delete-rule', id: 'missing' },
        ],
      },
    });
    expect(bad.status).toBe(422);
    expect(bad.body.error.details.problems[0].pointer).toBe('/changes/1/id');
    expect((await api('GET', '/rules/cs1', { token: R })).status).toBe(200);
    const seq = (await api('GET', '/rules', { token: R })).body.controlSeq as number;
    const staleSet = await api('POST', '/changesets', {
      token: A,
      body: { expectedControlSeq: seq - 1, changes: [{ op: 'clear-state' }] },
    });
    expect(staleSet.status).toBe(409);
    expect(
      (
        await api('POST', '/changesets', {
          token: A,
          body: { expectedControlSeq: seq, changes: [{ op: 'clear-state', ruleId: 'cs1' }] },
        })
      ).status,
    ).toBe(200);
  });

  it("checks a changeset's expectedVersion per op, parsed as the PUT routes parse theirs", async () => {
    const rv = (await api('PUT', '/rules/ev1', { token: W, body: bigRule(1) })).body
      .version as number;
    const mv = (
      await api('PUT', '/models/ev-m', { token: W, body: { kind: 'lookup', values: ['a'] } })
    ).body.version as number;
    const post = (changes: unknown[], token = W) =>
      api('POST', '/changesets', { token, body: { changes } });
    const upsert = (expectedVersion: unknown) => ({
      op: 'upsert-rule',
      rule: { id: 'ev1', ...bigRule(2) },
      expectedVersion,
    });
    // A string of digits is a version, as in If-Match: "<n>"; a stale one is a conflict.
    const staleString = await post([upsert(String(rv - 1))]);
    expect(staleString.status).toBe(409);
    expect(staleString.body.error.details).toMatchObject({ currentVersion: rv });
    // What PUT refuses with 400, a changeset refuses with 400 too.
    for (const bad of [-1, 1.5, 'x', true]) {
      const r = await post([upsert(bad)]);
      expect(r.status, JSON.stringify(bad)).toBe(400);
      expect(r.body.error.code).toBe('VIGIL_E_BAD_REQUEST');
    }
    // A model op expects the model's version, not that of a rule with the same id.
    const model = await post([
      {
        op: 'upsert-model',
        model: { id: 'ev-m', kind: 'lookup', values: ['b'] },
        expectedVersion: mv,
      },
    ]);
    expect(model.status).toBe(200);
    const staleModel = await post([{ op: 'delete-model', id: 'ev-m', expectedVersion: mv }]);
    expect(staleModel.status).toBe(409);
    // On an op without a version, expectedVersion means nothing: refused rather than ignored.
    const meaningless = await post([{ op: 'clear-state', ruleId: 'ev1', expectedVersion: 1 }], A);
    expect(meaningless.status).toBe(400);
    expect(meaningless.body.error.message).toMatch(/expectedControlSeq/);
    const ok = await post([upsert(String(rv))]);
    expect(ok.status).toBe(200);
  });
});

describe('REST API: models and lookup tables', () => {
  it('puts, gets, lists and deletes models, refuses tables over the size limit, and a rule uses a table', async () => {
    const put = await api('PUT', '/models/blocked', {
      token: W,
      body: { kind: 'lookup', values: ['c-1', 'c-2'] },
    });
    expect(put.status).toBe(201);
    const v = put.body.version as number;
    expect(put.body).toMatchObject({ id: 'blocked', kind: 'lookup', size: 2 });
    expect((await api('GET', '/models/blocked', { token: R })).body.model).toEqual({
      id: 'blocked',
      kind: 'lookup',
      values: ['c-1', 'c-2'],
    });
    expect(
      (await api('GET', '/models', { token: R })).body.models.map((m: { id: string }) => m.id),
    ).toContain('blocked');
    const replaced = await api('PUT', '/models/blocked', {
      token: W,
      body: { model: { kind: 'lookup', values: ['c-1', 'c-2', 'c-3'] }, expectedVersion: v },
    });
    expect(replaced.status).toBe(200);
    expect(replaced.body.size).toBe(3);
    expect(
      (
        await api('PUT', '/models/blocked', {
          token: W,
          body: { model: { kind: 'lookup', values: [] }, expectedVersion: v },
        })
      ).status,
    ).toBe(409);
    const bad = await api('PUT', '/models/blocked', {
      token: W,
      body: { kind: 'lookup', values: [{}] },
    });
    expect(bad.status).toBe(422);
    expect(bad.body.error.details.problems[0].pointer).toBe('/model/values');
    const big = await api('PUT', '/models/huge', {
      token: W,
      body: { kind: 'lookup', values: Array.from({ length: 20_000 }, (_, i) => `card-${i}`) },
    });
    expect(big.status).toBe(413);
    expect(big.body.error.details.limit).toBe(64 * 1024);
    const rule = await api('PUT', '/rules/blocked-card', {
      token: W,
      body: {
        on: ['payment'],
        when: { all: [{ fact: 'card', operator: 'in', value: { fact: 'list:blocked' } }] },
      },
    });
    expect(rule.status).toBe(201);
    const inUse = await api('DELETE', '/models/blocked', { token: W });
    expect(inUse.status).toBe(422);
    expect(inUse.body.error.message).toMatch(/list:blocked/);
    await api('DELETE', '/rules/blocked-card', { token: W });
    expect((await api('DELETE', '/models/blocked', { token: W })).status).toBe(200);
    expect((await api('GET', '/models/blocked', { token: R })).status).toBe(404);
    const mh = await api('GET', '/models/blocked/history', { token: R });
    expect(
      mh.body.revisions.map((r: { action: string; actor: string }) => `${r.action}:${r.actor}`),
    ).toEqual(['put:writer', 'put:writer', 'deleted:writer']);
    expect((await api('GET', '/models/never/history', { token: R })).status).toBe(404);
  });
});

describe('REST API: explain, status, stats, OpenAPI', () => {
  it("explains a verdict with each leaf's fact value and result", async () => {
    await api('PUT', '/rules/explained', {
      token: W,
      body: {
        on: ['payment'],
        key: 'card',
        when: {
          any: [
            { fact: 'amount', operator: 'greaterThan', value: 100 },
            { fact: 'country', operator: 'in', value: ['NG', 'RU'] },
          ],
        },
      },
    });
    const r = await api('POST', '/rules/explained/explain', {
      token: R,
      body: { event: { type: 'payment', card: 'c1', amount: 50, country: 'RU' } },
    });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      ruleId: 'explained',
      verdict: 'match',
      checks: {
        type: { passed: true },
        key: { field: 'card', value: 'c1', passed: true },
        when: {
          verdict: true,
          conditions: {
            any: [
              { fact: 'amount', factResult: 50, result: false },
              { fact: 'country', factResult: 'RU', result: true },
            ],
          },
        },
      },
    });
    const no = await api('POST', '/rules/explained/explain', {
      token: R,
      body: { event: { type: 'refund', card: 'c1', amount: 500 } },
    });
    expect(no.body.verdict).toBe('no-match');
    expect(no.body.checks.type.passed).toBe(false);
    const invalidEvent = await api('POST', '/rules/explained/explain', {
      token: R,
      body: { event: { amount: 1 } },
    });
    expect(invalidEvent.status).toBe(422);
    expect(
      (await api('POST', '/rules/nope/explain', { token: R, body: { event: { type: 'x' } } }))
        .status,
    ).toBe(404);
  });

  it("reports status per partition and per-rule stats from the service's metrics and ALERTS", async () => {
    const s = await api('GET', '/status', { token: R });
    expect(s.status).toBe(200);
    expect(s.body.partitions).toHaveLength(P);
    expect(s.body.workers).toHaveLength(2);
    await eventually(
      async () => (await api('GET', '/status', { token: R })).body.allOnLatest === true,
      10_000,
      'all partitions on the latest version',
    );
    const st = (await api('GET', '/status', { token: R })).body;
    expect(st.partitions[0]).toMatchObject({
      partition: 0,
      owner: `${st.instance} worker 0`,
      controlSeqApplied: st.latestAcceptedControlSeq,
      onLatest: true,
    });
    expect(st.instance).toMatch(/:0$/); // <hostname>:<httpPort>, the service's default instanceId
    expect(st.notHeldHere).toEqual([]);
    expect(st.activationSeconds.count).toBeGreaterThan(0);
    expect(st.activationSeconds.p99).toBeGreaterThan(0);
    const lastChange = (st.recentActivations as { controlSeq: number; partitions: number }[]).at(
      -1,
    );
    expect(lastChange).toMatchObject({ controlSeq: st.latestAcceptedControlSeq, partitions: P });
    const stats = await api('GET', '/rules/roll/stats', { token: R });
    expect(stats.status).toBe(200);
    expect(stats.body.alerts).toBe(2);
    expect(stats.body.matches).toBeGreaterThanOrEqual(2);
    expect(stats.body.errors).toBe(0);
    expect(stats.body.lastFired).toMatchObject({ key: 'k150' });
    expect((await api('GET', '/rules/never/stats', { token: R })).status).toBe(404);
  });

  it('describes exactly the registered routes in /v1/openapi.json (served without a token)', async () => {
    const r = await api('GET', '/openapi.json');
    expect(r.status).toBe(200);
    expect(r.body.openapi).toBe('3.0.3');
    const documented = Object.entries(r.body.paths as Record<string, Record<string, unknown>>)
      .flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`))
      .sort();
    // Express keeps the registered routes in the router's stack (not part of its typings).
    const stack = (
      vigil.controlPlane.router as unknown as {
        stack: { route?: { path: string; methods: Record<string, boolean> } }[];
      }
    ).stack;
    const registered = stack
      .flatMap((l) =>
        l.route === undefined
          ? []
          : Object.keys(l.route.methods).map(
              (m) => `${m.toUpperCase()} ${l.route?.path.replace(/:(\w+)/g, '{$1}')}`,
            ),
      )
      .sort();
    expect(registered.length).toBeGreaterThan(15);
    expect(documented).toEqual(registered);
    // Every route with a body can answer 415; every change can be stored but not applied in time.
    const ops = Object.values(r.body.paths as Record<string, Record<string, unknown>>).flatMap(
      (o) => Object.values(o) as { requestBody?: unknown; responses: Record<string, unknown> }[],
    );
    for (const o of ops.filter((x) => x.requestBody !== undefined))
      expect(Object.keys(o.responses)).toContain('415');
    expect(Object.keys(r.body.paths['/changesets'].post.responses)).toEqual(
      expect.arrayContaining(['500', '503', '504']),
    );
    expect(r.body.components.responses.E500).toBeDefined();
    expect(JSON.parse(JSON.stringify(OPENAPI))).toEqual(r.body);
  });
});
