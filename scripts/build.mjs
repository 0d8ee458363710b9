// Compiles the service's TypeScript to plain JavaScript under dist/ (same layout as the sources),
// which is what `npm start`, the Docker image and the recovery benchmark run. Only transpiles:
// types are checked by `npm run typecheck`. Running compiled JavaScript instead of loading the
// sources through tsx saves about half a second per thread at start-up, which counts in recovery
// after a crash (each worker thread loads its modules again). Plain JavaScript, like
// ensure-deps.mjs, so that it runs without tsx.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';
import { CODE_FOLDERS, sourceFiles } from './source-files.mjs';

const FOLDERS = [...CODE_FOLDERS, 'scripts'];

const started = Date.now();
rmSync('dist', { recursive: true, force: true });
const entryPoints = FOLDERS.flatMap((f) => sourceFiles(f));
await build({
  entryPoints,
  outdir: 'dist',
  outbase: '.',
  format: 'esm',
  platform: 'node',
  target: 'node20',
  // Stack traces point into the TypeScript sources when node runs with --enable-source-maps.
  sourcemap: true,
  logLevel: 'warning',
});
// A worker thread loads its modules again each time it starts (at start-up, after a crash, in
// recovery), and a service process before it can start any: one file with its dependencies in it
// loads in about half the time (a worker ~0.35 → ~0.15 s, the service's modules ~0.42 → ~0.22 s;
// bench/README.md). The bundles replace the per-file worker.js, main.js and start.js; the pool
// finds worker.js as ../service/worker.js from any of them, so the worker's bundle keeps that name
// although its source is service/threads/worker.ts.
const bundleName = (entry) =>
  entry === 'service/threads/worker.ts' ? 'service/worker.js' : entry.replace(/\.ts$/, '.js');
for (const entry of [
  'service/threads/worker.ts',
  'service/main.ts',
  'app/main.ts',
  'scripts/start.ts',
])
  await build({
    entryPoints: [entry],
    outfile: join('dist', bundleName(entry)),
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    sourcemap: true,
    logLevel: 'warning',
    allowOverwrite: true,
    // ioredis and others are CommonJS and call require(); an ES module bundle has none of its own.
    banner: {
      js: "import { createRequire as vigilCreateRequire } from 'node:module'; const require = vigilCreateRequire(import.meta.url);",
    },
  });
if (!process.argv.includes('--quiet'))
  console.log(
    `[vigil] compiled ${entryPoints.length} files to dist/ in ${Date.now() - started} ms`,
  );
