/**
 * `npm run soak -- --trials N [--seed S]`: crash trials beyond what the suite runs. Each trial
 * kills a service process with SIGKILL at a random moment while events flow; afterwards the
 * alerts in ALERTS are compared with a crash-free reference. The last line is one JSON object:
 * {"soak":"crash","trials":N,"alertsExpected":…,"lost":0,"duplicated":0}.
 */
import { ensureServersInstalled } from '../scripts/local-servers.js';
import { crashRun } from '../test/integration/crash-run.js';
import type { ServiceProcess } from '../test/integration/service-process.js';
import { startTestServers } from '../test/integration/servers.js';
import { positiveArg } from './positive-arg.js';

const arg = positiveArg;

const trials = arg('trials', 20);
const seed = arg('seed', Date.now() % 100_000);
const partitions = 4;
console.log(`soak: ${trials} crash trials, seed ${seed}`);
ensureServersInstalled((line) => console.log(`soak: ${line}`));
const servers = await startTestServers({ partitions, redis: true });
const processes: ServiceProcess[] = [];
let code = 0;
try {
  const r = await crashRun(servers, {
    trials,
    seed,
    partitions,
    outOfOrderMs: 50,
    track: (p) => processes.push(p),
  });
  if (r.lost + r.duplicated + r.unexpected > 0) code = 1;
  console.log(
    `soak: ${r.events} events, ${r.alertsExpected} alerts expected, ${r.lost} lost, ${r.duplicated} duplicated, ${r.unexpected} unexpected`,
  );
  console.log(
    JSON.stringify({
      soak: 'crash',
      trials,
      seed,
      events: r.events,
      alertsExpected: r.alertsExpected,
      lost: r.lost,
      duplicated: r.duplicated,
      unexpected: r.unexpected,
    }),
  );
} finally {
  for (const p of processes) await p.kill();
  await servers.stop();
}
process.exit(code);
