import { ensureServersInstalled } from '../service/index.js';

/** Runs once before the suite: the integration tests need real nats-server and redis-server binaries. */
export default function setup(): void {
  ensureServersInstalled((line) => console.log(`[test setup] ${line}`));
}
