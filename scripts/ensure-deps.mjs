// Installs npm dependencies when they are missing or older than the lock file, so that
// `npm start` and `npm test` work on a fresh clone. Plain JavaScript: it runs before tsx exists.
import { spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';

const marker = 'node_modules/.package-lock.json';
const stale =
  !existsSync(marker) || statSync('package-lock.json').mtimeMs > statSync(marker).mtimeMs + 1000;
if (stale) {
  console.log('[vigil] installing npm dependencies (npm ci) …');
  const r = spawnSync('npm', ['ci', '--no-audit', '--no-fund'], { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
