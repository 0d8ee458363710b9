import { afterEach, describe, expect, it } from 'vitest';
import type { RunningService } from '../../service/index.js';
import { prng } from '../prng.js';
import { processesCaughtUp, referenceAlertIds } from './reference.js';
import { ServiceProcess } from './service-process.js';
import {
  activated,
  drained,
  startTestServers,
  startTestService,
  type TestServers,
  readAlerts,
} from './servers.js';

const P = 8;
const OUT_OF_ORDER_MS = 50;

const RULES = [
  {
    id: 'big',
    on: ['payment'],
    key: 'k',
    when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 80 }] },
  },
  {
    id: 'burst',
    on: ['payment'],
    key: 'k',
    pattern: { kind: 'threshold', aggregate: 'count', window: 200, operator: '>=', value: 3 },
  },
  {
    id: 'spend',
    on: ['payment'],
    key: 'k',
    pattern: {
      kind: 'threshold',
      aggregate: 'sum',
      field: 'amount',
      window: 300,
      windowType: 'tumbling',
      operator: '>',
      value: 150,
    },
  },
  {
    id: 'login-pay',
    on: ['login', 'payment'],
    key: 'k',
    pattern: {
      kind: 'sequence',
      within: 500,
      steps: [
        { name: 'l', on: ['login'] },
        {
          name: 'p',
          on: ['payment'],
          when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 50 }] },
        },
      ],
    },
  },
  {
    id: 'unconfirmed',
    on: ['order'],
    key: 'k',
    pattern: { kind: 'absence', within: 150, expect: { on: ['confirm'] } },
  },
  {
    id: 'listed',
    on: ['payment'],
    key: 'k',
    when: { all: [{ fact: 'k', operator: 'in', value: { fact: 'list:watch' } }] },
  },
  // Keyed by another field than the partition key (k): through the re-keying hop.
  {
    id: 'fan-in',
    on: ['payment'],
    key: 'b',
    pattern: { kind: 'threshold', aggregate: 'count', window: 200, operator: '>=', value: 4 },
  },
  {
    id: 'b-kinds',
    on: ['payment', 'login'],
    key: ['b', 'type'],
    pattern: {
      kind: 'threshold',
      aggregate: 'distinct',
      field: 'k',
      window: 300,
      operator: '>=',
      value: 3,
    },
  },
  {
    id: 'b-big',
    on: ['payment'],
    key: 'b',
    when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 90 }] },
    alert: { suppressFor: 100 },
  },
  {
    id: 'b-unconfirmed',
    on: ['order'],
    key: 'b',
    pattern: { kind: 'absence', within: 25, expect: { on: ['confirm'] } },
  },
];
const REKEYED = new Set(['fan-in', 'b-kinds', 'b-big', 'b-unconfirmed']);
const REPORT_MS = 20;

/** Changes published while events flow: compatible and incompatible edits, pauses, clears, deletes, model updates. */
const CHANGES = [
  {
    op: 'upsert-rule',
    rule: { ...RULES[0], when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 60 }] } },
  },
  { op: 'upsert-rule', rule: { ...RULES[1], pattern: { ...RULES[1]?.pattern, window: 100 } } },
  { op: 'upsert-rule', rule: { ...RULES[1], pattern: { ...RULES[1]?.pattern, value: 2 } } },
  { op: 'pause-rule', id: 'login-pay' },
  { op: 'resume-rule', id: 'login-pay' },
  { op: 'clear-state', ruleId: 'spend' },
  { op: 'clear-state' },
  { op: 'upsert-model', model: { id: 'watch', kind: 'lookup', values: ['k3', 'k7', 'k11'] } },
  {
    op: 'changeset',
    changes: [
      { op: 'delete-rule', id: 'unconfirmed' },
      { op: 'upsert-rule', rule: { ...RULES[4], pattern: { ...RULES[4]?.pattern, within: 100 } } },
    ],
  },
  { op: 'upsert-rule', rule: { ...RULES[6], pattern: { ...RULES[6]?.pattern, value: 3 } } },
  { op: 'upsert-rule', rule: { ...RULES[6], pattern: { ...RULES[6]?.pattern, window: 150 } } },
  // A new key: a new key space, and the rule's state starts again there.
  { op: 'upsert-rule', rule: { ...RULES[7], key: ['type', 'b'] } },
  { op: 'clear-state', ruleId: 'fan-in' },
  { op: 'pause-rule', id: 'b-big' },
  { op: 'resume-rule', id: 'b-big' },
  { op: 'upsert-rule', rule: { id: 'bad', on: 'payment' } },
  // Well formed, refused by applyControl (no such model): no marker, a dead letter, alignment holds.
  { op: 'delete-model', id: 'no-such-model' },
];

let servers: TestServers | undefined;
let service: RunningService | undefined;
let processes: ServiceProcess[] = [];

afterEach(async () => {
  await service?.stop();
  for (const p of processes) await p.kill();
  await servers?.stop();
  service = undefined;
  processes = [];
  servers = undefined;
});

/**
 * One run: the service judges a random stream with bursts of changes. With `kill`, it runs as a
 * process that is killed with SIGKILL at a random point of the stream, and a new one takes over
 * from the checkpoints in Redis.
 */
async function run(workers: number, seed: number, kill: boolean): Promise<void> {
  const random = prng(seed);
  servers = await startTestServers({ partitions: P, redis: kill });
  const settings = {
    workers,
    outOfOrderMs: OUT_OF_ORDER_MS,
    tickIntervalMs: 0,
    rekey: 'on',
    partitionKey: 'k',
    rekeyReportMs: REPORT_MS,
  } as const;
  const start = async (): Promise<{ url: string }> => {
    if (!kill) {
      ({ service } = await startTestService(servers as TestServers, {
        partitions: P,
        ...settings,
      }));
      return service;
    }
    const proc = new ServiceProcess(servers as TestServers, P, {
      VIGIL_WORKERS: String(workers),
      VIGIL_OUT_OF_ORDER_MS: String(OUT_OF_ORDER_MS),
      VIGIL_PARTITION_KEY: settings.partitionKey,
      VIGIL_REKEY_REPORT_MS: String(REPORT_MS),
    });
    processes.push(proc);
    await proc.ready();
    return proc;
  };
  let running = await start();
  const killAt = kill ? 150 + Math.floor(random() * 450) : -1;
  const js = servers.js;
  const first = await js.publish(
    'vigil.control',
    JSON.stringify({
      op: 'replace-all',
      rules: RULES,
      models: [{ id: 'watch', kind: 'lookup', values: ['k1', 'k2'] }],
    }),
  );
  // Events published before the first rule set is in force meet no rules (the reference agrees);
  // on a loaded machine that left too few alerts for the run to test anything (34 in one CI run).
  await activated(running, first.seq, P);
  const types = ['payment', 'payment', 'payment', 'login', 'order', 'confirm'];
  const base = Date.now();
  let edited = false;
  const changeAt = new Set(Array.from({ length: 8 }, () => Math.floor(random() * 560)));
  for (let i = 0; i < 700; i++) {
    if (i === killAt) {
      await (processes.at(-1) as ServiceProcess).kill('SIGKILL');
      running = await start();
    }
    // Changes come alone or in bursts, so a partition may meet a marker while later changes are already known.
    if (changeAt.has(i)) {
      const burst = 1 + Math.floor(random() * 3);
      // The first change always edits a rule, so every run has alerts of more than one version.
      if (!edited) {
        await js.publish('vigil.control', JSON.stringify(CHANGES[0]));
        edited = true;
      }
      for (let b = 0; b < burst; b++)
        await js.publish(
          'vigil.control',
          JSON.stringify(CHANGES[Math.floor(random() * CHANGES.length)]),
        );
    }
    const k = `k${Math.floor(random() * 24)}`;
    const b = `b${Math.floor(random() * 5)}`;
    const ts = base + i * 4 - Math.floor(random() * 70);
    const type = types[Math.floor(random() * types.length)];
    await js.publish(
      `events.${k}`,
      JSON.stringify({ type, k, b, amount: Math.floor(random() * 100), ts, id: `e${i}` }),
    );
  }
  if (kill) {
    // The last process counts only what it read since its start: done at the heads of the logs.
    const last = processes.at(-1) as ServiceProcess;
    await processesCaughtUp(servers, [last], P, 'the last process to catch up');
    await last.kill('SIGTERM'); // a clean stop flushes every alert
  } else {
    await drained(servers, running);
    await service?.stop(); // flushes every alert
    service = undefined;
  }
  const got = await readAlerts(servers);
  const expected = await referenceAlertIds(servers, P, OUT_OF_ORDER_MS, {
    partitionKey: ['k'],
    reportEveryMs: REPORT_MS,
  });
  const actual = new Set(got.map((a) => a.id));
  expect(got.length, `seed ${seed}: no alert published twice`).toBe(actual.size);
  expect(expected.size, `seed ${seed}: the run must produce alerts`).toBeGreaterThan(50);
  expect(
    [...actual].filter((id) => !expected.has(id)),
    `seed ${seed}, ${workers} workers: alerts the reference did not produce`,
  ).toEqual([]);
  expect(
    [...expected].filter((id) => !actual.has(id)),
    `seed ${seed}, ${workers} workers: alerts the service missed`,
  ).toEqual([]);
  const rekeyed = got.filter((a) => REKEYED.has(a.ruleId));
  expect(
    rekeyed.length,
    `seed ${seed}: rules keyed by another field than the partition key alert (${JSON.stringify(Object.fromEntries([...REKEYED].map((r) => [r, rekeyed.filter((a) => a.ruleId === r).length])))})`,
  ).toBeGreaterThan(5);
  expect(
    new Set(got.map((a) => a.ruleVersion)).size,
    `seed ${seed}: changes took effect`,
  ).toBeGreaterThan(1);
}

describe('aligned activation (G2) as a property, across the re-keying hop too: the service equals a single-threaded reference over the same logs', () => {
  const base = Number(process.env.VIGIL_TEST_SEED ?? Date.now() % 100_000);
  for (const workers of [1, 2, 4]) {
    for (const k of [0, 1]) {
      const seed = base + workers * 10 + k;
      const kill = k === 1;
      it(`${workers} worker(s), seed ${seed}${kill ? ', killed with SIGKILL once' : ''}`, () =>
        run(workers, seed, kill));
    }
  }
});
