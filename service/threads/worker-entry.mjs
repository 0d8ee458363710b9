// Worker threads start here. When the service runs from TypeScript sources (npm start, tests),
// this registers tsx in the worker, whose module loader is not inherited from the main thread.
if (import.meta.url.endsWith('.mjs') && !process.env.VIGIL_COMPILED) {
  const { register } = await import('tsx/esm/api');
  register();
}
await import('./worker.ts');
