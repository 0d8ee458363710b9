/**
 * The service process: `node --import tsx service/main.ts` (what `npm start -- --no-demo` runs
 * after starting the servers). Settings come from the environment and `VIGIL_CONFIG`.
 */
import { resolveOptions } from './config.js';
import { startService } from './service.js';

const options = resolveOptions();
const service = await startService(options);
console.log(
  `[vigil] HTTP on ${service.url} (/healthz, /readyz, /metrics); ${options.workers} workers, ${options.partitions} partitions`,
);
let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    console.log(`[vigil] ${signal}: stopping`);
    service.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error(err);
        process.exit(1);
      },
    );
  });
}
