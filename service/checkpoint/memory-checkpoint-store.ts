import { writeCheckpointParts, type CheckpointParts, type RuleSetJSON } from '../../rules/index.js';
import type { MemoryCheckpoint, MemoryStoreBackend } from '../ownership/memory-backend.js';
import {
  CheckpointFencedError,
  type CheckpointStore,
  type StoredCheckpoint,
} from './checkpoint-store.js';

/**
 * Checkpoints in a {@link MemoryStoreBackend}: the {@link CheckpointStore} of unit tests, with the
 * Redis store's semantics. A write is checked and applied in one synchronous step, as the Lua
 * script does it: refused (CheckpointFencedError, nothing changed) under a token older than the
 * last one the partition's leases handed out or than the stored checkpoint's, or with an older
 * offset under the same token; a full write replaces the keyed state and buffered chunks but
 * keeps the lineage numbers; the numbers given are written before those let go.
 */
export class MemoryCheckpointStore implements CheckpointStore {
  private closed = false;

  constructor(
    private readonly backend: MemoryStoreBackend,
    /** A view's: the key space whose downstream partitions it stores. */
    private readonly space?: string,
  ) {}

  forSpace(space: string): CheckpointStore {
    return new MemoryCheckpointStore(this.backend, space);
  }

  private get checkpoints(): Map<number, MemoryCheckpoint> {
    return this.backend.checkpointsOf(this.space);
  }

  private check(): void {
    if (this.closed) throw new Error('checkpoint store closed');
    this.backend.answer();
  }

  async load(partition: number): Promise<StoredCheckpoint | undefined> {
    this.check();
    const c = this.checkpoints.get(partition);
    if (c?.meta === undefined) return undefined;
    // Copies: the stored maps go on changing under later writes.
    return {
      offset: c.offset ?? 0,
      controlSeq: c.controlSeq,
      meta: c.meta,
      buffered: [...c.buffer],
      lineages: [...c.lineages],
      fields: [...c.state],
    };
  }

  async loadOffset(partition: number): Promise<number> {
    this.check();
    return this.checkpoints.get(partition)?.offset ?? 0;
  }

  async save(partition: number, parts: CheckpointParts, fence: number): Promise<void> {
    this.check();
    const issued = this.backend.tokens.get(partition) ?? 0;
    const stored = this.checkpoints.get(partition);
    const storedFence = stored?.fence ?? 0;
    const storedOffset = stored?.offset ?? -1;
    const refused =
      fence < issued
        ? `fence ${fence} is older than the lease token ${issued}`
        : fence < storedFence
          ? `fence ${fence} is older than ${storedFence}`
          : fence === storedFence && parts.offset < storedOffset
            ? `offset ${parts.offset} is older than ${storedOffset}`
            : undefined;
    if (refused !== undefined)
      throw new CheckpointFencedError(`checkpoint of partition ${partition} refused: ${refused}`);
    const c = this.backend.checkpoint(partition, this.space);
    writeCheckpointParts({ fields: c.state, buffered: c.buffer, lineages: c.lineages }, parts);
    c.fence = fence;
    c.offset = parts.offset;
    c.controlSeq = parts.controlSeq;
    c.meta = parts.meta;
  }

  async saveRuleSet(controlSeq: number, text: string): Promise<void> {
    this.check();
    if (!this.backend.ruleSets.has(controlSeq)) this.backend.ruleSets.set(controlSeq, text);
  }

  async loadRuleSet(controlSeq: number): Promise<RuleSetJSON | undefined> {
    this.check();
    const text = this.backend.ruleSets.get(controlSeq);
    return text === undefined ? undefined : (JSON.parse(text) as RuleSetJSON);
  }

  async loadControlSeqs(partitions: number): Promise<number[]> {
    this.check();
    return Array.from({ length: partitions }, (_, p) => this.checkpoints.get(p)?.controlSeq ?? 0);
  }

  async close(): Promise<void> {
    if (this.space === undefined) this.closed = true;
  }
}
