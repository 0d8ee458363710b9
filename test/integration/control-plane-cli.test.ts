import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningVigil } from '../../app/index.js';
import { runCli } from '../../control-plane/cli.js';
import { startTestVigil, testTokens } from './control-plane-client.js';
import { activated, drained, startTestServers, type TestServers } from './servers.js';

const P = 2;
const tokens = testTokens();
let servers: TestServers;
let vigil: RunningVigil;
let dir: string;

/** Runs one vigil command in this process against the running service. */
async function vigilCmd(
  args: string[],
  token = tokens.write.token,
): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCli(args, {
    out: (t) => (out += `${t}\n`),
    err: (t) => (err += `${t}\n`),
    env: { VIGIL_URL: vigil.url, VIGIL_TOKEN: token, NATS_URL: servers.nats.url },
    cwd: dir,
  });
  return { code, out, err };
}

const rule = (id: string, value: number, severity = 'high') => ({
  id,
  on: ['payment'],
  key: 'card',
  when: { all: [{ fact: 'amount', operator: 'greaterThan', value }] },
  alert: { severity, title: `${id} on {{card}}` },
});

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'vigil-cli-'));
  servers = await startTestServers({ partitions: P });
  vigil = await startTestVigil(servers, Object.values(tokens), {
    workers: 1,
    partitions: P,
    outOfOrderMs: 0,
    tickIntervalMs: 0,
  });
  mkdirSync(join(dir, 'rules'));
  writeFileSync(join(dir, 'rules', 'a.json'), JSON.stringify(rule('cli-a', 100)));
  writeFileSync(join(dir, 'rules', 'b.json'), JSON.stringify([rule('cli-b', 200, 'low')]));
  writeFileSync(join(dir, 'one.json'), JSON.stringify(rule('cli-a', 50)));
  writeFileSync(join(dir, 'bad.json'), JSON.stringify({ id: 'cli-bad', on: 'payment' }));
  writeFileSync(
    join(dir, 'table.json'),
    JSON.stringify({ id: 'cli-list', kind: 'lookup', values: ['c-1'] }),
  );
});

afterAll(async () => {
  await vigil?.stop();
  await servers?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('vigil CLI against a running service', () => {
  it('applies a folder of rules as one changeset, lists them as a table and as JSON', async () => {
    const applied = await vigilCmd(['rules', 'apply', '-f', 'rules', '--reason', 'initial']);
    expect(applied.code).toBe(0);
    expect(applied.out).toMatch(/applied at control sequence \d+/);
    expect(applied.out).toMatch(/cli-a\s+created/);
    expect(applied.out).toMatch(/cli-b\s+created/);
    const list = await vigilCmd(['rules', 'list']);
    expect(list.code).toBe(0);
    expect(list.out.split('\n')[0]).toMatch(/^ID\s+STATE\s+VERSION\s+SEVERITY/);
    expect(list.out).toMatch(/cli-b\s+active\s+\d+\s+low\s+created\s+writer/);
    const json = JSON.parse((await vigilCmd(['rules', 'list', '--json'])).out) as {
      rules: { id: string }[];
    };
    expect(json.rules.map((r) => r.id).sort()).toEqual(['cli-a', 'cli-b']);
  });

  it('shows history and diffs, rolls back, pauses, resumes, deletes, with meaningful exit codes', async () => {
    const v1 = (
      JSON.parse((await vigilCmd(['rules', 'get', 'cli-a', '--json'])).out) as { version: number }
    ).version;
    const local = await vigilCmd(['rules', 'diff', 'cli-a', '-f', 'one.json']);
    expect(local.out.trim()).toBe('~ /when/all/0/value: 100 -> 50');
    expect(
      (await vigilCmd(['rules', 'apply', '-f', 'one.json', '--expect', String(v1 - 1)])).code,
    ).toBe(5);
    expect(
      (await vigilCmd(['rules', 'apply', '-f', 'one.json', '--expect', String(v1)])).code,
    ).toBe(0);
    const diff = await vigilCmd(['rules', 'diff', 'cli-a']);
    expect(diff.out.trim()).toBe('~ /when/all/0/value: 100 -> 50');
    const rb = await vigilCmd(['rules', 'rollback', 'cli-a', '--to', String(v1)]);
    expect(rb.code).toBe(0);
    expect(rb.out).toMatch(new RegExp(`back at the definition of version ${v1}`));
    const get = await vigilCmd(['rules', 'get', 'cli-a']);
    expect(JSON.parse(get.out.split('\n').slice(1).join('\n'))).toEqual(rule('cli-a', 100));
    expect((await vigilCmd(['rules', 'pause', 'cli-a'])).out).toMatch(/paused at control sequence/);
    expect((await vigilCmd(['rules', 'resume', 'cli-a'])).code).toBe(0);
    const history = await vigilCmd(['rules', 'history', 'cli-a']);
    const actions = history.out
      .trim()
      .split('\n')
      .slice(1)
      .map((l) => l.split(/\s+/)[3]);
    expect(actions).toEqual(['created', 'kept', 'kept', 'paused', 'resumed']);
    expect(history.out).toMatch(/rollback to version/);
    expect((await vigilCmd(['rules', 'delete', 'cli-b'])).code).toBe(0);
    const missing = await vigilCmd(['rules', 'get', 'cli-b']);
    expect(missing.code).toBe(4);
    expect(missing.err).toMatch(/no rule "cli-b"/);
    const forbidden = await vigilCmd(['rules', 'apply', '-f', 'one.json'], tokens.read.token);
    expect(forbidden.code).toBe(3);
    expect(forbidden.err).toMatch(/"write" role/);
    expect((await vigilCmd(['rules', 'frobnicate'])).code).toBe(2);
    expect((await vigilCmd(['rules', 'apply', '-f', 'nope.json'])).code).toBe(2);
    expect((await vigilCmd(['rules', 'apply', '-f', 'rules', '--expect', '1'])).code).toBe(2);
  });

  it('validates files (exit 1 with every problem), manages models, explains and reports status', async () => {
    const bad = await vigilCmd(['validate', '-f', 'bad.json']);
    expect(bad.code).toBe(1);
    expect(bad.out).toMatch(/✗ cli-bad/);
    expect(bad.out).toMatch(/\/rule\/on: /);
    expect((await vigilCmd(['validate', '-f', 'rules'])).code).toBe(0);
    expect((await vigilCmd(['rules', 'apply', '-f', 'bad.json'])).code).toBe(1);

    expect((await vigilCmd(['models', 'put', '-f', 'table.json'])).out).toMatch(
      /model cli-list \(lookup, 1 entries\)/,
    );
    expect((await vigilCmd(['models', 'list'])).out).toMatch(/cli-list\s+lookup\s+1/);
    expect(JSON.parse((await vigilCmd(['models', 'get', 'cli-list'])).out)).toEqual({
      id: 'cli-list',
      kind: 'lookup',
      values: ['c-1'],
    });
    expect((await vigilCmd(['models', 'delete', 'cli-list'])).code).toBe(0);
    expect((await vigilCmd(['models', 'get', 'cli-list'])).code).toBe(4);

    const ex = await vigilCmd([
      'explain',
      'cli-a',
      '--event',
      '{"type":"payment","card":"c-9","amount":120}',
    ]);
    expect(ex.code).toBe(0);
    expect(ex.out).toMatch(/: match/);
    expect(ex.out).toMatch(/✓ amount greaterThan 100 {2}\(fact = 120\)/);
    const no = await vigilCmd([
      'explain',
      'cli-a',
      '--event',
      '{"type":"payment","card":"c-9","amount":20}',
    ]);
    expect(no.out).toMatch(/✗ amount greaterThan 100 {2}\(fact = 20\)/);

    const st = await vigilCmd(['status']);
    expect(st.code).toBe(0);
    expect(st.out).toMatch(/^ready: true/);
    expect(st.out).toMatch(/PARTITION\s+OWNER\s+CONTROL SEQ/);
  });

  it("warns at validate time when sampled events lack a rule's key field, and rules stats counts them", async () => {
    const transfer = (i: number) =>
      servers.js.publish(
        `events.acct-${i}`,
        JSON.stringify({ type: 'transfer', amount: 5, from: 'a' }),
      );
    for (let i = 0; i < 20; i++) await transfer(i);
    const keyed = {
      id: 'cli-keyed',
      on: ['transfer'],
      key: 'to',
      when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 0 }] },
      alert: { title: 'to {{to}}' },
    };
    writeFileSync(join(dir, 'keyed.json'), JSON.stringify(keyed));
    const v = await vigilCmd(['validate', '-f', 'keyed.json']);
    // Valid, so exit 0, with the warning under the rule.
    expect(v.code).toBe(0);
    expect(v.out).toMatch(
      /✓ cli-keyed\n {2}! in the last \d+ events of EVENTS, 20 of the 20 of its types lack the key field "to"/,
    );
    // A rule keyed by a field the events carry gets no warning; ?sample=0 reads nothing.
    writeFileSync(
      join(dir, 'keyed-ok.json'),
      JSON.stringify({ ...keyed, id: 'cli-keyed-ok', key: 'from' }),
    );
    expect((await vigilCmd(['validate', '-f', 'keyed-ok.json'])).out).not.toMatch(/!/);

    expect((await vigilCmd(['rules', 'apply', '-f', 'keyed.json'])).code).toBe(0);
    const seq = (await servers.jsm.streams.info('CONTROL')).state.last_seq;
    await activated(vigil.service, seq, P);
    for (let i = 0; i < 5; i++) await transfer(100 + i);
    await drained(servers, vigil.service);
    const stats = await vigilCmd(['rules', 'stats', 'cli-keyed']);
    expect(stats.code).toBe(0);
    expect(stats.out).toMatch(/events of its types without its key field: 5/);
    expect(stats.out).toMatch(/! 5 events lacked the key field/);
    expect(
      JSON.parse((await vigilCmd(['rules', 'stats', 'cli-keyed', '--json'])).out),
    ).toMatchObject({ id: 'cli-keyed', keyMissing: 5, matches: 0 });
    expect((await vigilCmd(['rules', 'delete', 'cli-keyed'])).code).toBe(0);
  });

  it('tails ALERTS filtered by rule and severity', async () => {
    const v = (
      JSON.parse((await vigilCmd(['rules', 'get', 'cli-a', '--json'])).out) as { version: number }
    ).version;
    const last = (
      JSON.parse((await vigilCmd(['rules', 'list', '--json'])).out) as { controlSeq: number }
    ).controlSeq;
    await activated(vigil.service, last, P);
    await servers.js.publish(
      'events.c-5',
      JSON.stringify({ type: 'payment', card: 'c-5', amount: 500 }),
    );
    const tail = await vigilCmd([
      'alerts',
      'tail',
      '--rule',
      'cli-a',
      '--severity',
      'high',
      '--from-start',
      '--limit',
      '1',
    ]);
    expect(tail.code).toBe(0);
    expect(tail.out).toMatch(new RegExp(`high\\s+cli-a@${v}\\s+c-5\\s+cli-a on c-5`));
  });

  it('back-tests the log, with a candidate from files, and shows progress', async () => {
    // Enough records for progress reports (one every 500) and for a run to be cancelled midway;
    // no rule watches "noise", so the alert counts below stay as they are.
    for (let i = 0; i < 6000; i += 500)
      await Promise.all(
        Array.from({ length: 500 }, (_, j) =>
          servers.js.publish(`events.n-${i + j}`, JSON.stringify({ type: 'noise', card: 'n' })),
        ),
      );
    const plain = await vigilCmd(['backtest']);
    expect(plain.code).toBe(0);
    expect(plain.out).toMatch(/^\d+ records \(EVENTS 1\.\.\d+\): 1 alerts/);
    expect(plain.out).toMatch(/cli-a\s+1/);
    writeFileSync(join(dir, 'strict.json'), JSON.stringify(rule('cli-a', 1000)));
    const progress: string[] = [];
    let out = '';
    const code = await runCli(['backtest', '-f', 'strict.json', '--from', '1'], {
      out: (t) => (out += t),
      err: () => undefined,
      progress: (t) => progress.push(t),
      env: { VIGIL_URL: vigil.url, VIGIL_TOKEN: tokens.write.token },
      cwd: dir,
    });
    expect(code).toBe(0);
    expect(out).toMatch(
      /1 alerts from the rules in force, 0 from the candidate; 0 only from the candidate, 1 only from the rules in force/,
    );
    expect(out).toMatch(/cli-a\s+1\s+0/);
    // A bar was drawn (the log has over 500 records, so the run reported progress), then cleared.
    expect(progress.some((t) => /^\[#+\.*\] \d+% \d+\/\d+ records$/.test(t))).toBe(true);
    expect(progress.at(-1)).toBe('');
  });

  it('cancels a running back-test (DELETE), and exits 130 on Ctrl-C during vigil backtest', async () => {
    const headers = {
      authorization: `Bearer ${tokens.write.token}`,
      'content-type': 'application/json',
    };
    const started = await fetch(`${vigil.url}/v1/backtest`, {
      method: 'POST',
      headers,
      body: '{}',
    });
    expect(started.status).toBe(202);
    const { id } = (await started.json()) as { id: string };
    const cancelled = await fetch(`${vigil.url}/v1/backtest/${id}`, { method: 'DELETE', headers });
    expect(cancelled.status).toBe(200);
    expect(((await cancelled.json()) as { status: string }).status).toBe('cancelled');

    const ctrlC = new AbortController();
    let err = '';
    const code = await runCli(['backtest'], {
      out: () => undefined,
      err: (t) => (err += t),
      // The first progress report is as good a moment as any to press Ctrl-C.
      progress: () => ctrlC.abort(),
      env: { VIGIL_URL: vigil.url, VIGIL_TOKEN: tokens.write.token },
      cwd: dir,
      signal: ctrlC.signal,
    });
    expect(code).toBe(130);
    expect(err).toMatch(/interrupted/);
  });

  it('reads URL and token from a config file, and says what is wrong with a bad one', async () => {
    const file = join(dir, 'cli.json');
    writeFileSync(file, JSON.stringify({ url: vigil.url, token: tokens.read.token }));
    const io = (env: NodeJS.ProcessEnv) => {
      const r = { out: '', err: '' };
      return {
        r,
        io: { out: (t: string) => (r.out += t), err: (t: string) => (r.err += t), env, cwd: dir },
      };
    };
    const a = io({ VIGIL_CLI_CONFIG: file });
    expect(await runCli(['rules', 'list', '--json'], a.io)).toBe(0);
    expect(JSON.parse(a.r.out).rules.length).toBeGreaterThan(0);
    const b = io({ HOME: dir });
    expect(await runCli(['rules', 'list', '--config', 'cli.json'], b.io)).toBe(0);
    writeFileSync(file, JSON.stringify({ url: vigil.url, tokn: 'x' }));
    const c = io({});
    expect(await runCli(['rules', 'list', '--config', file], c.io)).toBe(2);
    expect(c.r.err).toMatch(/"tokn" is not a setting/);
  });

  it('calls a missing token file and a malformed URL usage errors (exit 2), with a clear message', async () => {
    const run = async (args: string[], env: NodeJS.ProcessEnv) => {
      const r = { out: '', err: '' };
      const code = await runCli(args, {
        out: (t) => (r.out += t),
        err: (t) => (r.err += t),
        env,
        cwd: dir,
      });
      return { code, ...r };
    };
    const noFile = await run(['rules', 'list'], {
      VIGIL_URL: vigil.url,
      VIGIL_TOKEN_FILE: '/nonexistent',
    });
    expect(noFile.code).toBe(2);
    expect(noFile.err).toMatch(/token file VIGIL_TOKEN_FILE=\/nonexistent: there is no such file/);
    const badUrl = await run(['rules', 'list', '--url', 'http//nope'], {
      VIGIL_TOKEN: tokens.read.token,
    });
    expect(badUrl.code).toBe(2);
    expect(badUrl.err).toMatch(/"http\/\/nope" is not an http\(s\) URL/);
  });

  it('runs as the vigil bin, with URL and token from the environment', async () => {
    const run = promisify(execFile);
    const bin = resolve(import.meta.dirname, '../../control-plane/vigil.mjs');
    const env = { ...process.env, VIGIL_URL: vigil.url, VIGIL_TOKEN: tokens.read.token };
    const ok = await run(process.execPath, [bin, 'rules', 'list', '--json'], { env });
    expect((JSON.parse(ok.stdout) as { rules: unknown[] }).rules.length).toBeGreaterThan(0);
    const denied = await run(process.execPath, [bin, 'rules', 'list'], {
      env: { ...env, VIGIL_TOKEN: 'x'.repeat(32) },
    }).catch((e: { code: number; stderr: string }) => e);
    expect(denied).toMatchObject({ code: 3 });
    expect((denied as { stderr: string }).stderr).toMatch(/not valid/);
  });
});
