// Installs npm dependencies when any is missing, so that `npm start` and `npm test` work on a
// fresh clone. Plain JavaScript: it runs before tsx is there. (Presence, not file times: a fresh
// clone's files are all newer than anything installed.)
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';

const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
const names = [...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.devDependencies ?? {})];
const missing = names.filter((name) => !existsSync(`node_modules/${name}/package.json`));
if (missing.length > 0) {
  console.log(
    `[vigil] installing npm dependencies (npm ci; missing: ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ', …' : ''})`,
  );
  const r = spawnSync('npm', ['ci', '--no-audit', '--no-fund'], { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
