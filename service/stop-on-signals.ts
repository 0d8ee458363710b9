/**
 * Stops `what` on the first SIGINT or SIGTERM and exits: 0 after a clean stop, 1 when it failed.
 * A second signal while stopping is ignored, so Ctrl-C twice does not cut the final checkpoints.
 */
export function stopOnSignals(stop: () => Promise<void>): void {
  let stopping = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      if (stopping) return;
      stopping = true;
      console.log(`[vigil] ${signal}: stopping`);
      stop().then(
        () => process.exit(0),
        (err: unknown) => {
          console.error(err);
          process.exit(1);
        },
      );
    });
  }
}
