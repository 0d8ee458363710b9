import {
  checkpointParts,
  checkpointPartsBytes,
  checkpointRuleSets,
  requeueCheckpoint,
  restorePartitionParts,
  restoreRuleSet,
  ruleSetText,
  type CheckpointParts,
  type PartitionState,
  type RekeyOptions,
  type RuleLimits,
  type RuleSet,
  type RuleSetAt,
} from '../../rules/index.js';
import type { CheckpointStore, StoredCheckpoint } from './checkpoint-store.js';
import { CheckpointFencedError } from './checkpoint-store.js';
import type { WorkerMetrics } from '../metrics/metrics.js';

export interface CheckpointerOptions {
  readonly partition: number;
  /** The `partition` label of its metrics and log lines (a downstream partition's differs); default the number. */
  readonly label?: string;
  readonly store: CheckpointStore;
  readonly metrics: WorkerMetrics;
  /** Resolves once every alert and dead letter published so far is acknowledged. */
  readonly settled: () => Promise<void>;
  /** Fencing token of this owner's lease (0 without leases). */
  readonly fence: () => number;
  /** A write was refused because a newer owner holds the partition: it must stop at once. */
  readonly onFenced?: () => void;
  /** Records processed past the last checkpoint before the partition stops reading. */
  readonly maxUncheckpointed: number;
  /** A checkpoint not written within this many ms counts as failed (the store queues commands while away). */
  readonly timeoutMs: number;
  /** Every this many checkpoints, the keyed state is rewritten whole; 0: never. */
  readonly fullEvery: number;
  /**
   * Rule sets stored or being stored, by control sequence, shared by the worker's partitions:
   * each is serialised and written once, and a checkpoint that needs one waits for that write.
   */
  readonly savedRuleSets: Map<number, Promise<void>>;
  readonly log: (level: 'warn' | 'error', message: string) => void;
}

/**
 * Checkpoints one partition: incremental writes of changed keys (a whole rewrite every
 * `fullEvery`, if set), only after everything the checkpoint covers has been published (so a crash after a
 * checkpoint can lose no alert). When checkpoints fail (Redis away), the partition stops reading
 * once `maxUncheckpointed` records wait, and goes on by itself when a checkpoint succeeds.
 */
export class Checkpointer {
  private lastOffset: number;
  private running: Promise<boolean> | undefined;
  private count = 0;
  private failing = false;
  private closed = false;
  private draining = false;
  private readonly p: string;

  constructor(
    private readonly state: () => PartitionState,
    /** Runs a function between two records of the partition (see PartitionRunner.atBoundary). */
    private readonly atBoundary: (fn: () => void) => void,
    private readonly o: CheckpointerOptions,
    restoredOffset: number,
  ) {
    this.lastOffset = restoredOffset;
    this.p = o.label ?? String(o.partition);
  }

  /** True while the last attempt failed. */
  get healthy(): boolean {
    return !this.failing;
  }

  /** Takes a checkpoint unless one is under way (then waits for it). Resolves whether it succeeded. */
  checkpoint(): Promise<boolean> {
    this.running ??= this.write().finally(() => (this.running = undefined));
    return this.running;
  }

  /**
   * No more checkpoints, and `admit` lets the partition go so that it can stop (its lease is lost
   * or it is being handed over). Waits for a checkpoint under way.
   */
  async close(): Promise<void> {
    this.closed = true;
    await this.running;
  }

  /**
   * `admit` no longer holds the partition back (checkpoints go on): the partition is being
   * stopped, and must reach its final checkpoint even while Redis is away.
   */
  drain(): void {
    this.draining = true;
  }

  /** Backpressure: waits, retrying checkpoints, while too many records are not covered by one. */
  admit(): Promise<void> | undefined {
    // Nothing to wait for, the common case: no promise per record.
    return this.mustWait() ? this.waitForCheckpoint() : undefined;
  }

  private mustWait(): boolean {
    return (
      !this.closed &&
      !this.draining &&
      this.state().offset - this.lastOffset >= this.o.maxUncheckpointed
    );
  }

  private async waitForCheckpoint(): Promise<void> {
    while (this.mustWait()) {
      if (await this.checkpoint()) continue;
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  private async write(): Promise<boolean> {
    if (this.closed) return false;
    const st = this.state();
    if (st.offset === this.lastOffset && st.dirty.size === 0) return true;
    const started = performance.now();
    const full = this.o.fullEvery > 0 && ++this.count % this.o.fullEvery === 0;
    const ruleSets = new Map<number, RuleSet>();
    let timer: NodeJS.Timeout | undefined;
    // Taken between records, together with the set of publishes it must wait for.
    const [parts, settled] = await new Promise<[CheckpointParts, Promise<void>]>((resolve) =>
      this.atBoundary(() => {
        ruleSets.set(st.ruleSet.controlSeq, st.ruleSet);
        for (const rs of st.tags.keys()) ruleSets.set(rs.controlSeq, rs);
        // A key space's partition: those its sources reported and its released events carried.
        for (const rs of st.down?.ruleSets() ?? []) ruleSets.set(rs.controlSeq, rs);
        resolve([checkpointParts(st, full), this.o.settled()]);
      }),
    );
    try {
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`not written within ${this.o.timeoutMs} ms`)),
          this.o.timeoutMs,
        );
      });
      const write = async (): Promise<void> => {
        await settled;
        for (const [seq, rs] of ruleSets) {
          let saved = this.o.savedRuleSets.get(seq);
          if (saved === undefined) {
            // Partitions checkpoint together: without this, each would serialise the same rule set.
            saved = this.o.store.saveRuleSet(seq, ruleSetText(rs));
            this.o.savedRuleSets.set(seq, saved);
            saved.catch(() => this.o.savedRuleSets.delete(seq));
          }
          await saved;
        }
        await this.o.store.save(this.o.partition, parts, this.o.fence());
      };
      await Promise.race([write(), timeout]);
      this.lastOffset = parts.offset;
      this.failing = false;
      const m = this.o.metrics;
      m.checkpointSeconds.observe((performance.now() - started) / 1000);
      m.checkpointBytes.inc({ kind: full ? 'full' : 'incremental' }, checkpointPartsBytes(parts));
      m.checkpointLast.set({ partition: this.p }, Date.now() / 1000);
      m.checkpointOffset.set({ partition: this.p }, parts.offset);
      return true;
    } catch (e) {
      // Its keys go to the next checkpoint, with their state as it is by then. A timed-out write
      // that lands later is harmless: it is older than the next one, which carries these keys too.
      requeueCheckpoint(st, parts);
      this.failing = true;
      const fenced = e instanceof CheckpointFencedError;
      this.o.metrics.checkpointFailures.inc({
        partition: this.p,
        reason: fenced ? 'fenced' : 'store',
      });
      this.o.log('warn', `checkpoint of partition ${this.p} failed: ${(e as Error).message}`);
      if (fenced && this.o.fence() > 0) {
        // Not ours any more: retrying cannot help, and the partition must stop reading now.
        this.closed = true;
        this.o.onFenced?.();
      }
      return false;
    } finally {
      clearTimeout(timer);
    }
  }
}

/** What restoring a partition took, for the start-up report (ms). */
export interface RestoreTimings {
  /** Reading the checkpoint from the store. */
  readonly loadMs: number;
  /** Rebuilding the partition's state from it (rule sets fetched from the store included). */
  readonly restoreMs: number;
  /** Keys of keyed state restored. */
  readonly keys: number;
}

/** A checkpoint read from the store, not yet restored; see {@link restoreLoaded}. */
export interface LoadedCheckpoint {
  readonly stored: StoredCheckpoint;
  readonly loadMs: number;
}

/** Reads partition `p`'s last checkpoint (undefined: none), timing the read. */
export async function loadCheckpoint(
  store: CheckpointStore,
  p: number,
): Promise<LoadedCheckpoint | undefined> {
  const started = performance.now();
  const stored = await store.load(p);
  return stored === undefined ? undefined : { stored, loadMs: performance.now() - started };
}

/** A checkpoint read by a {@link CheckpointLoader}; `release` once it has been restored. */
export interface HeldCheckpoint {
  readonly loaded: LoadedCheckpoint | undefined;
  readonly release: () => void;
}

/**
 * Reads partitions' checkpoints ahead of their restore, at most `concurrency` read and not yet
 * restored. A worker handed several partitions at start-up reads them while it still connects to
 * NATS and while the first ones restore; the limit bounds how much checkpoint text is alive at
 * once, since a restore's young-generation collections copy whatever is alive.
 *
 * The limit also sets when the first state arrives. Redis runs every command it has read from a
 * connection before it sends any reply, so eight state reads sent together meant the first
 * partition's state (and every offset queued behind them) came back only once Redis had built all
 * eight replies; with 1,000,000 keys on a busy machine that was 2 s after the worker asked. Two
 * at a time, the first one restores while the next is on its way.
 */
export class CheckpointLoader {
  private readonly ahead = new Map<number, Promise<HeldCheckpoint>>();
  private readonly offsets = new Map<number, Promise<number>>();
  private active = 0;
  private readonly queue: (() => void)[] = [];

  constructor(
    private readonly store: CheckpointStore,
    private readonly concurrency = 2,
  ) {}

  /** Starts reading `p`'s checkpoint, for a {@link take} to come. */
  prefetch(p: number): void {
    if (this.ahead.has(p)) return;
    // Sent ahead of the read (and not held back by the limit), which waits for its reply: the
    // partition's consumer can be created from the offset while the state is read, and the
    // offsets of every partition come back before Redis builds any state reply.
    const offset = this.store.loadOffset(p);
    offset.catch(() => undefined);
    this.offsets.set(p, offset);
    const read = offset.then(
      () => this.read(p),
      () => this.read(p),
    );
    // A read that fails is reported to take(); dropped unread, it is no unhandled rejection.
    read.catch(() => undefined);
    this.ahead.set(p, read);
  }

  /** Drops a read ahead of `p`: the partition is being stopped, so its checkpoint will change. */
  forget(p: number): void {
    const read = this.ahead.get(p);
    this.ahead.delete(p);
    this.offsets.delete(p);
    void read?.then(
      (h) => h.release(),
      () => undefined,
    );
  }

  /** The offset of `p`'s checkpoint (0: none), read ahead of the checkpoint itself. */
  offset(p: number): Promise<number> {
    const offset = this.offsets.get(p) ?? this.store.loadOffset(p);
    this.offsets.delete(p);
    return offset;
  }

  /** `p`'s checkpoint: the one read ahead, or a new read. */
  take(p: number): Promise<HeldCheckpoint> {
    const read = this.ahead.get(p) ?? this.read(p);
    this.ahead.delete(p);
    return read;
  }

  private async read(p: number): Promise<HeldCheckpoint> {
    if (this.active >= this.concurrency) await new Promise<void>((r) => this.queue.push(r));
    this.active++;
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      this.active--;
      this.queue.shift()?.();
    };
    try {
      const loaded = await loadCheckpoint(this.store, p);
      if (loaded === undefined) release();
      return { loaded, release };
    } catch (e) {
      release();
      throw e;
    }
  }
}

/**
 * Restores a partition from a checkpoint {@link loadCheckpoint} read: state, offset, and the
 * rule sets it was judged under (from `ruleSetAt`, the worker's CONTROL follower, or from the
 * store when the follower no longer holds them).
 */
export async function restoreLoaded(
  store: CheckpointStore,
  loaded: LoadedCheckpoint,
  ruleSetAt: RuleSetAt,
  o: {
    readonly outOfOrderMs: number;
    readonly limits: RuleLimits;
    /** A partition of the event log with the re-keying hop on: what it re-keys. */
    readonly rekey?: RekeyOptions;
  },
): Promise<{ state: PartitionState; offset: number; timings: RestoreTimings }> {
  const started = performance.now();
  const { stored } = loaded;
  const extra = new Map<number, RuleSet>();
  for (const seq of checkpointRuleSets(stored.meta)) {
    if (ruleSetAt(seq) !== undefined) continue;
    const json = await store.loadRuleSet(seq);
    if (json !== undefined) extra.set(seq, restoreRuleSet(json, o.limits));
  }
  const restoreStarted = performance.now();
  const state = restorePartitionParts(stored, (seq) => ruleSetAt(seq) ?? extra.get(seq), {
    outOfOrderMs: o.outOfOrderMs,
    limits: o.limits,
    ...(o.rekey === undefined ? {} : { rekey: o.rekey }),
  });
  const timings = {
    // Rule sets read from the store count as reading.
    loadMs: loaded.loadMs + (restoreStarted - started),
    restoreMs: performance.now() - restoreStarted,
    keys: state.states.size + state.raw.size,
  };
  return { state, offset: stored.offset, timings };
}

/**
 * Restores partition `p` from its last checkpoint ({@link loadCheckpoint}, then
 * {@link restoreLoaded}). Undefined when the partition has no checkpoint.
 */
export async function restoreCheckpoint(
  store: CheckpointStore,
  p: number,
  ruleSetAt: RuleSetAt,
  o: { readonly outOfOrderMs: number; readonly limits: RuleLimits },
): Promise<{ state: PartitionState; offset: number; timings: RestoreTimings } | undefined> {
  const loaded = await loadCheckpoint(store, p);
  return loaded === undefined ? undefined : restoreLoaded(store, loaded, ruleSetAt, o);
}

/**
 * Takes the checkpoints of a worker's partitions in turn, each once per interval, partition p at
 * p/P of the way through it. Why: taking a checkpoint encodes the partition's changed keys
 * synchronously, and all of a worker's partitions at once held its records (and the markers among
 * them) for their sum. `onHealth` hears when the worker's checkpoints as a whole turn healthy or
 * not. Returns a stop function.
 */
export function startCheckpointTurns(opts: {
  readonly intervalMs: number;
  readonly partitions: number;
  /** The checkpointers of partition p when this worker runs it (with its key spaces' partitions). */
  readonly checkpointersOf: (p: number) => readonly Checkpointer[];
  readonly onHealth: (ok: boolean) => void;
}): () => void {
  let turn = 0;
  let healthy = true;
  const timer = setInterval(
    () => {
      const cs = opts.checkpointersOf(turn++ % opts.partitions);
      if (cs.length === 0) return;
      void Promise.all(cs.map((c) => c.checkpoint())).then(() => {
        let ok = true;
        for (let p = 0; p < opts.partitions; p++)
          for (const c of opts.checkpointersOf(p)) ok &&= c.healthy;
        if (ok !== healthy) opts.onHealth(ok);
        healthy = ok;
      });
    },
    Math.max(1, opts.intervalMs / opts.partitions),
  );
  return () => clearInterval(timer);
}
