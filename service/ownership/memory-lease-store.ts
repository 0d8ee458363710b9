import { InstanceReplacedError, type LeaseHolder, type LeaseStore } from './lease-store.js';
import type { MemoryStoreBackend } from './memory-backend.js';

/**
 * Partition leases and membership in a {@link MemoryStoreBackend}, for one process: the
 * {@link LeaseStore} of unit tests. Each operation does what the Redis store's Lua script does, in
 * one synchronous step, so it is atomic too.
 */
export class MemoryLeaseStore implements LeaseStore {
  private closed = false;

  constructor(
    private readonly backend: MemoryStoreBackend,
    readonly instanceId: string,
    readonly incarnation: string,
    private readonly ttlMs: number,
  ) {}

  private check(): void {
    if (this.closed) throw new Error('lease store closed');
    this.backend.answer();
  }

  private holds(p: number, token: number): boolean {
    const h = this.backend.lease(p)?.holder;
    return (
      h !== undefined &&
      h.instanceId === this.instanceId &&
      h.incarnation === this.incarnation &&
      h.token === token
    );
  }

  private grant(p: number, token: number, expiresAt: number): void {
    const holder = { instanceId: this.instanceId, incarnation: this.incarnation, token };
    this.backend.leases.set(p, { holder, expiresAt });
  }

  async connected(): Promise<void> {
    this.check();
  }

  async heartbeat(claim = false): Promise<string[]> {
    this.check();
    const { members } = this.backend;
    const now = this.backend.now();
    const cur = members.get(this.instanceId);
    if (cur !== undefined && !claim && cur.incarnation !== this.incarnation)
      throw new InstanceReplacedError(this.instanceId);
    members.set(this.instanceId, { incarnation: this.incarnation, expiresAt: now + this.ttlMs });
    const live: string[] = [];
    for (const [id, m] of members) {
      if (m.expiresAt <= now) members.delete(id);
      else live.push(id);
    }
    return live.sort();
  }

  async leave(): Promise<void> {
    this.check();
    if (this.backend.members.get(this.instanceId)?.incarnation === this.incarnation)
      this.backend.members.delete(this.instanceId);
  }

  async acquire(p: number): Promise<number | undefined> {
    this.check();
    // Registered under another incarnation, or swept: as the Redis script, refused as replaced.
    if (this.backend.members.get(this.instanceId)?.incarnation !== this.incarnation)
      throw new InstanceReplacedError(this.instanceId);
    const expiresAt = this.backend.now() + this.ttlMs;
    const h = this.backend.lease(p)?.holder;
    if (h !== undefined) {
      if (h.instanceId !== this.instanceId) return undefined;
      if (h.incarnation === this.incarnation) {
        this.grant(p, h.token, expiresAt);
        return h.token;
      }
    }
    const token = this.backend.nextToken(p);
    this.grant(p, token, expiresAt);
    return token;
  }

  async reissue(p: number, token: number): Promise<number | undefined> {
    this.check();
    if (!this.holds(p, token)) return undefined;
    const expiresAt = this.backend.lease(p)?.expiresAt ?? 0;
    if (expiresAt - this.backend.now() <= 0) return undefined;
    const fresh = this.backend.nextToken(p);
    this.grant(p, fresh, expiresAt);
    return fresh;
  }

  async renew(p: number, token: number): Promise<boolean> {
    this.check();
    if (!this.holds(p, token)) return false;
    this.grant(p, token, this.backend.now() + this.ttlMs);
    return true;
  }

  async release(p: number, token: number): Promise<boolean> {
    this.check();
    if (!this.holds(p, token)) return false;
    this.backend.leases.delete(p);
    return true;
  }

  async holders(partitions: number): Promise<(LeaseHolder | undefined)[]> {
    this.check();
    return Array.from({ length: partitions }, (_, p) => this.backend.lease(p)?.holder);
  }

  async lock(ms: number): Promise<boolean> {
    this.check();
    const l = this.backend.lock;
    if (l !== undefined && l.instanceId !== this.instanceId) return false;
    this.backend.lock = {
      instanceId: this.instanceId,
      incarnation: this.incarnation,
      expiresAt: this.backend.now() + ms,
    };
    return true;
  }

  async unlock(): Promise<void> {
    this.check();
    const l = this.backend.lock;
    if (l?.instanceId === this.instanceId && l.incarnation === this.incarnation)
      this.backend.lock = undefined;
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}
