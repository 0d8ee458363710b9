/**
 * The service process with its REST API: `node dist/app/main.js` once built, or
 * `node --import tsx app/main.ts` from the sources. Settings
 * come from the environment and `VIGIL_CONFIG` (service) and `VIGIL_API_TOKENS` /
 * `VIGIL_API_TOKENS_FILE` (API tokens).
 */
import { stopOnSignals } from '../service/index.js';
import { startVigil } from './start-vigil.js';

const vigil = await startVigil();
console.log(`[vigil] HTTP on ${vigil.url} (/: links to /healthz, /readyz, /metrics, /v1)`);
stopOnSignals(() => vigil.stop());
