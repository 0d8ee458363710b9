/**
 * The service process with its REST API: `node --import tsx control-plane/main.ts`. Settings
 * come from the environment and `VIGIL_CONFIG` (service) and `VIGIL_API_TOKENS` /
 * `VIGIL_API_TOKENS_FILE` (API tokens).
 */
import { startVigil } from './serve.js';

const vigil = await startVigil();
console.log(`[vigil] HTTP on ${vigil.url} (/healthz, /readyz, /metrics, /v1)`);
let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    console.log(`[vigil] ${signal}: stopping`);
    vigil.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error(err);
        process.exit(1);
      },
    );
  });
}
