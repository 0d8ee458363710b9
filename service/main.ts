/**
 * The service process: `node dist/service/main.js` once `npm run build` has compiled it, or
 * `node --import tsx service/main.ts` from the sources (what `npm start -- --no-demo` runs after
 * starting the servers). Settings come from the environment and `VIGIL_CONFIG`.
 */
import { resolveOptions } from './config.js';
import { startService } from './start-service.js';
import { stopOnSignals } from './stop-on-signals.js';

const options = resolveOptions();
const service = await startService(options);
console.log(
  `[vigil] HTTP on ${service.url} (/healthz, /readyz, /metrics); ${options.workers} workers, ${options.partitions} partitions`,
);
stopOnSignals(() => service.stop());
