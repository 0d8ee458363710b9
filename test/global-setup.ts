import { ensurePrometheusInstalled, ensureServersInstalled } from '../scripts/local-servers.js';

/**
 * Runs once before the suite: the integration tests need real nats-server and redis-server
 * binaries, the dashboard and alerting-rule tests prometheus and promtool.
 */
export default function setup(): void {
  ensureServersInstalled((line) => console.log(`[test setup] ${line}`));
  ensurePrometheusInstalled((line) => console.log(`[test setup] ${line}`));
}
