import { prng } from '../prng.js';
import { processesCaughtUp, referenceAlertIds } from './reference.js';
import { type TestServers, readAlerts } from './servers.js';
import { ServiceProcess } from './service-process.js';

export const CRASH_RULES = [
  {
    id: 'big',
    on: ['payment'],
    key: 'k',
    when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 70 }] },
  },
  {
    id: 'burst',
    on: ['payment'],
    key: 'k',
    pattern: { kind: 'threshold', aggregate: 'count', window: 300, operator: '>=', value: 3 },
  },
  {
    id: 'spend',
    on: ['payment'],
    key: 'k',
    pattern: {
      kind: 'threshold',
      aggregate: 'sum',
      field: 'amount',
      window: 400,
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
      within: 600,
      steps: [
        { name: 'l', on: ['login'] },
        { name: 'p', on: ['payment'] },
      ],
    },
  },
  {
    id: 'unconfirmed',
    on: ['order'],
    key: 'k',
    pattern: { kind: 'absence', within: 200, expect: { on: ['confirm'] } },
  },
  // Keyed by another field than the partition key (k): through the re-keying hop.
  {
    id: 'fan-in',
    on: ['payment'],
    key: 'b',
    pattern: { kind: 'threshold', aggregate: 'count', window: 100, operator: '>=', value: 4 },
  },
  {
    id: 'b-unconfirmed',
    on: ['order'],
    key: ['b', 'type'],
    pattern: { kind: 'absence', within: 30, expect: { on: ['confirm'] } },
  },
];

/** The hop's settings of the crash runs (for the reference): rules keyed by `k`, the partition key, take none. */
export const REKEY = { partitionKey: ['k'], reportEveryMs: 25 };
/** The same settings for a service process (its environment)... */
export const REKEY_ENV = {
  VIGIL_PARTITION_KEY: REKEY.partitionKey.join(','),
  VIGIL_REKEY_REPORT_MS: String(REKEY.reportEveryMs),
};
/** ...and for a service in the test's process. */
export const REKEY_OPTIONS = {
  partitionKey: REKEY.partitionKey.join(','),
  rekeyReportMs: REKEY.reportEveryMs,
};

/** A change to the first rule that keeps its state (a tighter threshold), published mid-run. */
export const TIGHTEN_BIG = JSON.stringify({
  op: 'upsert-rule',
  rule: {
    ...CRASH_RULES[0],
    when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 50 }] },
  },
});

export interface CrashRunResult {
  readonly seed: number;
  readonly trials: number;
  readonly events: number;
  readonly alertsExpected: number;
  /** Alerts of the rules keyed by another field than the partition key (through the hop). */
  readonly alertsRekeyed: number;
  readonly lost: number;
  readonly duplicated: number;
  readonly unexpected: number;
}

/**
 * Crash trials over one growing log: each trial starts a service process, publishes a batch of
 * events while it runs, and kills it with SIGKILL at a random moment. A rule change lands while a
 * process runs, another while none does. Then a last process catches up and stops cleanly, and
 * the alerts in ALERTS are compared with a crash-free single-threaded reference over the logs.
 */
export async function crashRun(
  servers: TestServers,
  opts: {
    trials: number;
    seed: number;
    partitions: number;
    outOfOrderMs: number;
    track?: (p: ServiceProcess) => void;
  },
): Promise<CrashRunResult> {
  const random = prng(opts.seed);
  const env = {
    VIGIL_OUT_OF_ORDER_MS: String(opts.outOfOrderMs),
    ...REKEY_ENV,
  };
  const types = ['payment', 'payment', 'payment', 'login', 'order', 'confirm'];
  const base = Date.now();
  let published = 0;
  const publish = async (count: number): Promise<void> => {
    for (const end = published + count; published < end; published++) {
      const k = `k${Math.floor(random() * 16)}`;
      const event = {
        type: types[Math.floor(random() * types.length)],
        k,
        b: `b${Math.floor(random() * 4)}`,
        amount: Math.floor(random() * 100),
        ts: base + published * 5 - Math.floor(random() * 40),
        id: `e${published}`,
      };
      await servers.js.publish(`events.${k}`, JSON.stringify(event));
    }
  };
  for (let trial = 0; trial < opts.trials; trial++) {
    const svc = new ServiceProcess(servers, opts.partitions, env);
    opts.track?.(svc);
    await svc.ready();
    // The service creates the streams; the rules go in once it has.
    if (trial === 0)
      await servers.js.publish(
        'vigil.control',
        JSON.stringify({ op: 'replace-all', rules: CRASH_RULES }),
      );
    const flowing = publish(150 + Math.floor(random() * 150));
    if (trial === Math.floor(opts.trials / 3))
      await servers.js.publish('vigil.control', TIGHTEN_BIG);
    await new Promise((r) => setTimeout(r, 50 + Math.floor(random() * 400)));
    await svc.kill('SIGKILL');
    await flowing;
    // A rule change while no process runs must apply at the same log position after recovery.
    if (trial === Math.floor((2 * opts.trials) / 3))
      await servers.js.publish('vigil.control', JSON.stringify({ op: 'clear-state' }));
  }
  const last = new ServiceProcess(servers, opts.partitions, env);
  opts.track?.(last);
  await last.ready();
  await processesCaughtUp(servers, [last], opts.partitions, 'the last process to catch up');
  await last.kill('SIGTERM'); // a clean stop flushes every alert
  const alerts = await readAlerts(servers);
  const ids = alerts.map((a) => a.id);
  const expected = await referenceAlertIds(servers, opts.partitions, opts.outOfOrderMs, REKEY);
  const got = new Set(ids);
  return {
    seed: opts.seed,
    trials: opts.trials,
    events: published,
    alertsExpected: expected.size,
    alertsRekeyed: alerts.filter((a) => a.ruleId === 'fan-in' || a.ruleId === 'b-unconfirmed')
      .length,
    lost: [...expected].filter((id) => !got.has(id)).length,
    duplicated: ids.length - got.size,
    unexpected: [...got].filter((id) => !expected.has(id)).length,
  };
}
