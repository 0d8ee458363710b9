#!/usr/bin/env node
// The `vigil` bin. Run from TypeScript sources: register tsx, then load the CLI.
if (!process.env.VIGIL_COMPILED) {
  const { register } = await import('tsx/esm/api');
  register();
}
await import('./cli-main.ts');
