import { CheckpointLoader, type Checkpointer } from '../checkpoint/checkpointer.js';
import { rekeyLog } from '../ingest/partition-consumer.js';
import { partitionLabel } from './partition-runner.js';
import { stopPart, type Owned, type PartitionParts, type RunningPart } from './partition-parts.js';
import type { PartitionStopReason } from './worker-protocol.js';

/**
 * The key spaces' partitions of the re-keying hop that a worker runs: with each partition p of the
 * event log it holds, partition p of every key space its rule sets re-key to, under p's lease and
 * fencing token. Each reads `rekey.<space>.<p>` and checkpoints under `vigil:r:<space>:<p>`.
 */
export class KeySpacePartitions {
  constructor(private readonly parts: PartitionParts) {}

  /**
   * Starts key space `space`'s partition of `own`'s number: its consumer and its state restored
   * from its own checkpoint, run and checkpointed under the same lease.
   */
  async start(own: Owned, space: string, current: () => boolean): Promise<void> {
    const { parts } = this;
    const { control, options: o } = parts.d;
    const p = own.partition;
    if (own.dropped || !current() || own.downstreams.has(space)) return;
    const entry: RunningPart = { runner: undefined, checkpointer: undefined };
    own.downstreams.set(space, entry);
    const label = partitionLabel(p, space);
    const store = parts.d.checkpoints?.store.forSpace(space);
    const checkpoints =
      store === undefined
        ? undefined
        : parts.restoring(store, new CheckpointLoader(store, 1), {
            outOfOrderMs: 0,
            limits: o.limits,
          });
    const opened = await parts.open(
      own,
      `partition ${p} of key space ${space}`,
      checkpoints,
      rekeyLog(space, p),
    );
    if (opened === undefined) return;
    const { source, restored } = opened;
    control.started(label, restored?.state.ruleSet.controlSeq ?? 0);
    let checkpointer: Checkpointer | undefined;
    const runner = parts.runner(p, source, {
      outOfOrderMs: 0,
      onApplied: (_, seq) => control.appliedAt(label, seq),
      initialState: restored?.state,
      admit: () => checkpointer?.admit(),
      downstream: { space },
    });
    if (store !== undefined)
      checkpointer = parts.checkpointer(own, runner, store, {
        label,
        offset: restored?.offset ?? 0,
        settled: () => parts.d.publisher.settled(),
      });
    entry.runner = runner;
    entry.checkpointer = checkpointer;
    runner.start();
  }

  /**
   * Stops `own`'s key spaces' partitions (after the event log's, whose final checkpoint waits for
   * what it sent them). Their labels, and whether each took a final checkpoint.
   */
  async stop(
    own: Owned,
    reason: PartitionStopReason,
  ): Promise<{ labels: string[]; checkpointed: boolean }> {
    let checkpointed = true;
    const labels: string[] = [];
    for (const [space, x] of own.downstreams) {
      checkpointed = (await stopPart(x, reason)) && checkpointed;
      const label = partitionLabel(own.partition, space);
      this.parts.d.control.stopped(label);
      labels.push(label);
    }
    return { labels, checkpointed };
  }
}
