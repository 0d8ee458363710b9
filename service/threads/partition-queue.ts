/**
 * The starts and stops of a worker's partitions: those of one partition run one after another,
 * in the order they arrive, and partitions run side by side. A step that fails is logged; the
 * next one still runs.
 */
export class PartitionQueue {
  private readonly chains = new Map<number, Promise<void>>();

  constructor(private readonly log: (level: 'error', message: string) => void) {}

  /** Whether a step of partition `p` is queued or running. */
  has(p: number): boolean {
    return this.chains.has(p);
  }

  /** Runs `fn` once every step queued before it for partition `p` has ended. */
  run(p: number, fn: () => Promise<void>): void {
    const next = (this.chains.get(p) ?? Promise.resolve())
      .then(fn)
      .catch((err: Error) => this.log('error', `partition ${p}: ${err.stack ?? err.message}`));
    this.chains.set(p, next);
    void next.then(() => this.chains.get(p) === next && this.chains.delete(p));
  }

  /** Resolves once every step queued now has ended. */
  async settled(): Promise<void> {
    await Promise.all([...this.chains.values()]);
  }
}
