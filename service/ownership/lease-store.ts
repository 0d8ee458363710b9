import { Redis } from 'ioredis';
import { ErrorCode, VigilError } from '../../rules/index.js';

/**
 * This process's instance id was registered by a newer process (a restart of the same instance,
 * or a second process started with the same `instanceId`): this one may hold no lease any more.
 */
export class InstanceReplacedError extends VigilError {
  override name = 'InstanceReplacedError';
  readonly instanceId: string;

  constructor(instanceId: string, options: { cause?: unknown } = {}) {
    super(
      ErrorCode.LeaseReplaced,
      `instance id "${instanceId}" was taken over by a newer process; give each process its own VIGIL_INSTANCE_ID (or HTTP port)`,
      { retryable: false, ...options },
    );
    this.instanceId = instanceId;
  }
}

/** Who holds a partition's lease. */
export interface LeaseHolder {
  readonly instanceId: string;
  readonly incarnation: string;
  readonly token: number;
}

// A lease is one string key with a TTL, "<instance> <incarnation> <token>"; the fencing token of
// a partition is a counter next to it (INCR on every acquisition, never reset), which the
// checkpoint script reads: a write with an older token is refused by Redis itself.
// Member entries are "<incarnation> <expires at ms, Redis clock>" in one hash.

// The partition's next fencing token: the counter's next value, or one above the token stored
// with the checkpoint should the counter have been lost (Redis restored from an older snapshot):
// else every write of the new owner would be fenced.
const LUA_NEXT_TOKEN = `
local function nextToken(counter, checkpoint)
  local token = redis.call('INCR', counter)
  local stored = tonumber(redis.call('HGET', checkpoint, 'fence') or '0')
  if token <= stored then
    token = stored + 1
    redis.call('SET', counter, token)
  end
  return token
end
`;

// KEYS: lease, token counter, members, checkpoint meta hash. ARGV: instance, incarnation, ttl ms.
// Returns the token, or nil when another instance holds the lease. A lease held by an older
// incarnation of the same instance (a restarted process) is taken over at once, with a new token.
const ACQUIRE = `${LUA_NEXT_TOKEN}
local m = redis.call('HGET', KEYS[3], ARGV[1])
if not m or string.match(m, '^(%S+)') ~= ARGV[2] then return redis.error_reply('VIGIL_REPLACED') end
local v = redis.call('GET', KEYS[1])
if v then
  local owner, inc, token = string.match(v, '^(%S+) (%S+) (%d+)$')
  if owner ~= ARGV[1] then return false end
  if inc == ARGV[2] then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return tonumber(token)
  end
end
local token = nextToken(KEYS[2], KEYS[4])
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. token, 'PX', ARGV[3])
return token
`;

// KEYS: lease, token counter, checkpoint meta hash. ARGV: holder string, instance and
// incarnation. The lease under a new token, its expiry unchanged; nil when it is not held so any
// more.
const REISSUE = `${LUA_NEXT_TOKEN}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then return false end
local token = nextToken(KEYS[2], KEYS[3])
redis.call('SET', KEYS[1], ARGV[2] .. ' ' .. token, 'PX', ttl)
return token
`;

// KEYS: lease. ARGV: holder string, ttl ms. 1 when renewed, 0 when the lease is not ours any more.
const RENEW = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`;

// KEYS: lease. ARGV: holder string. 1 when released, 0 when it was not ours.
const RELEASE = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`;

// KEYS: members. ARGV: instance, incarnation, ttl ms, claim (1 on the first heartbeat).
// Registers or refreshes this process, drops expired members, returns the live instance ids.
// A later heartbeat that finds another incarnation under its id has been replaced.
const HEARTBEAT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and ARGV[4] ~= '1' and string.match(cur, '^(%S+)') ~= ARGV[2] then
  return redis.error_reply('VIGIL_REPLACED')
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. (now + tonumber(ARGV[3])))
local all = redis.call('HGETALL', KEYS[1])
local live = {}
for i = 1, #all, 2 do
  local expires = tonumber(string.match(all[i + 1], ' (%d+)$'))
  if expires <= now then redis.call('HDEL', KEYS[1], all[i]) else live[#live + 1] = all[i] end
end
return live
`;

// KEYS: members. ARGV: instance, incarnation. Leaves the cluster (clean stop).
const LEAVE = `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and string.match(cur, '^(%S+)') == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 1
`;

// KEYS: lock. ARGV: instance, incarnation, ms. Taken when free or held by an older incarnation
// of this instance (a process killed while rebalancing does not hold up its own restart).
const LOCK = `
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^(%S+)') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])
return 1
`;

// KEYS: lock. ARGV: holder. Compare and delete.
const UNLOCK = `
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
`;

type Scripts = Record<
  | 'vigilAcquire'
  | 'vigilRenew'
  | 'vigilReissue'
  | 'vigilRelease'
  | 'vigilHeartbeat'
  | 'vigilLeave'
  | 'vigilUnlock'
  | 'vigilLock',
  (args: (string | number)[]) => Promise<unknown>
>;

function replaced(e: unknown): boolean {
  return e instanceof Error && e.message.includes('VIGIL_REPLACED');
}

/** Parses a lease value; undefined for no lease. */
export function parseHolder(v: string | null | undefined): LeaseHolder | undefined {
  const m = v ? /^(\S+) (\S+) (\d+)$/.exec(v) : null;
  if (m === null) return undefined;
  return { instanceId: m[1] ?? '', incarnation: m[2] ?? '', token: Number(m[3]) };
}

/** Redis keys of partition ownership; `prefix` is the checkpoint store's. */
export const leaseKeys = {
  lease: (p: number, prefix = 'vigil:'): string => `${prefix}lease:${p}`,
  token: (p: number, prefix = 'vigil:'): string => `${prefix}lease:${p}:token`,
  members: (prefix = 'vigil:'): string => `${prefix}members`,
  rebalance: (prefix = 'vigil:'): string => `${prefix}rebalance`,
  /** The checkpoint's meta hash (checkpoint-store.ts), whose `fence` field a new token exceeds. */
  checkpoint: (p: number, prefix = 'vigil:'): string => `${prefix}p:${p}`,
} as const;

/**
 * Partition leases and process membership, as one process (an instance id and an incarnation, a
 * nonce per start) sees them. Every operation is one atomic step of the store. The fencing token a
 * lease carries is tied to the checkpoint store: a new token exceeds the one stored with the
 * partition's checkpoint, and a checkpoint written under a token older than the last one handed
 * out is refused (`CheckpointFencedError`), so both live in one store (Redis, or one
 * `MemoryStoreBackend`).
 */
export interface LeaseStore {
  readonly instanceId: string;
  /** Resolves once the store can be used (operations fail fast before that). */
  connected(timeoutMs?: number): Promise<void>;
  /**
   * Registers (first call: `claim`, taking over the id from an older incarnation) or refreshes
   * this process, and drops the members whose registration expired; returns the live instance
   * ids, sorted.
   * @throws InstanceReplacedError when a newer process took this instance id.
   */
  heartbeat(claim?: boolean): Promise<string[]>;
  /** Removes this process from the members (clean stop), so the others rebalance at once. */
  leave(): Promise<void>;
  /**
   * Takes the lease of partition `p` when it is free (or held by an older incarnation of this
   * instance) under a new fencing token; a lease this process holds already is extended and
   * keeps its token. Undefined when another process holds it.
   * @throws InstanceReplacedError when this process is not registered under its incarnation.
   */
  acquire(p: number): Promise<number | undefined>;
  /**
   * Hands the lease of `p`, held with `token`, a new fencing token, keeping its expiry: a worker
   * thread that died may have left a checkpoint write on its way to the store, and its successor
   * on the old token could not tell that write from its own. Under the new one, the store
   * refuses it. Undefined when the lease is not held with `token` any more.
   */
  reissue(p: number, token: number): Promise<number | undefined>;
  /** Extends the lease by the TTL; false when it is not held with `token` any more (expired or taken). */
  renew(p: number, token: number): Promise<boolean>;
  /** Gives the lease up; false when it was not held with `token` any more. */
  release(p: number, token: number): Promise<boolean>;
  /** The holder of each partition's lease, `undefined` for a free partition. */
  holders(partitions: number): Promise<(LeaseHolder | undefined)[]>;
  /**
   * Takes the cluster-wide rebalance lock (one process rebalances at a time) for `ms`; it is
   * taken over from an older incarnation of this instance, so a process killed while
   * rebalancing does not hold up its own restart.
   */
  lock(ms: number): Promise<boolean>;
  /** Lets the lock go if this process holds it. */
  unlock(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Partition leases and process membership in Redis (the production {@link LeaseStore}), for one
 * process. Every operation is one Lua script, so it is atomic; the fence tie with checkpoints is
 * in the scripts (LUA_NEXT_TOKEN here, the token check of checkpoint-store.ts).
 */
export class RedisLeaseStore implements LeaseStore {
  private readonly redis: Redis;
  private readonly scripts: Scripts;

  constructor(
    url: string,
    readonly instanceId: string,
    readonly incarnation: string,
    private readonly ttlMs: number,
    private readonly prefix = 'vigil:',
  ) {
    // No offline queue: a lease operation while Redis is away fails at once rather than
    // completing late, after the lease it meant to renew may have expired.
    this.redis = new Redis(url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      enableAutoPipelining: true,
      // A stalled Redis must not hold a renewal round forever.
      commandTimeout: ttlMs,
      // Back soon after Redis is: well within the registration TTL, during which the others
      // presume this process alive after an outage (ioredis' default waits up to 2 s).
      retryStrategy: (times) => Math.min(times * 50, 1000, Math.max(50, Math.floor(ttlMs / 5))),
    });
    this.redis.on('error', () => {
      // Reconnects by itself; failures surface on the commands.
    });
    this.redis.defineCommand('vigilAcquire', { numberOfKeys: 4, lua: ACQUIRE });
    this.redis.defineCommand('vigilRenew', { numberOfKeys: 1, lua: RENEW });
    this.redis.defineCommand('vigilReissue', { numberOfKeys: 3, lua: REISSUE });
    this.redis.defineCommand('vigilRelease', { numberOfKeys: 1, lua: RELEASE });
    this.redis.defineCommand('vigilHeartbeat', { numberOfKeys: 1, lua: HEARTBEAT });
    this.redis.defineCommand('vigilLeave', { numberOfKeys: 1, lua: LEAVE });
    this.redis.defineCommand('vigilUnlock', { numberOfKeys: 1, lua: UNLOCK });
    this.redis.defineCommand('vigilLock', { numberOfKeys: 1, lua: LOCK });
    this.scripts = this.redis as unknown as Scripts;
  }

  /** Resolves once connected (commands fail fast before that). */
  async connected(timeoutMs = 10_000): Promise<void> {
    if (this.redis.status === 'ready') return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`Redis not reachable within ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.redis.once('ready', () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  private holder(token: number): string {
    return `${this.instanceId} ${this.incarnation} ${token}`;
  }

  async heartbeat(claim = false): Promise<string[]> {
    try {
      const live = (await this.scripts.vigilHeartbeat([
        leaseKeys.members(this.prefix),
        this.instanceId,
        this.incarnation,
        this.ttlMs,
        claim ? '1' : '0',
      ])) as string[];
      return [...live].sort();
    } catch (e) {
      if (replaced(e)) throw new InstanceReplacedError(this.instanceId, { cause: e });
      throw e;
    }
  }

  async leave(): Promise<void> {
    await this.scripts.vigilLeave([
      leaseKeys.members(this.prefix),
      this.instanceId,
      this.incarnation,
    ]);
  }

  async acquire(p: number): Promise<number | undefined> {
    try {
      const token = await this.scripts.vigilAcquire([
        leaseKeys.lease(p, this.prefix),
        leaseKeys.token(p, this.prefix),
        leaseKeys.members(this.prefix),
        leaseKeys.checkpoint(p, this.prefix),
        this.instanceId,
        this.incarnation,
        this.ttlMs,
      ]);
      return token === null ? undefined : Number(token);
    } catch (e) {
      if (replaced(e)) throw new InstanceReplacedError(this.instanceId, { cause: e });
      throw e;
    }
  }

  async reissue(p: number, token: number): Promise<number | undefined> {
    const fresh = await this.scripts.vigilReissue([
      leaseKeys.lease(p, this.prefix),
      leaseKeys.token(p, this.prefix),
      leaseKeys.checkpoint(p, this.prefix),
      this.holder(token),
      `${this.instanceId} ${this.incarnation}`,
    ]);
    return fresh === null ? undefined : Number(fresh);
  }

  async renew(p: number, token: number): Promise<boolean> {
    return (
      Number(
        await this.scripts.vigilRenew([
          leaseKeys.lease(p, this.prefix),
          this.holder(token),
          this.ttlMs,
        ]),
      ) === 1
    );
  }

  async release(p: number, token: number): Promise<boolean> {
    return (
      Number(
        await this.scripts.vigilRelease([leaseKeys.lease(p, this.prefix), this.holder(token)]),
      ) === 1
    );
  }

  async holders(partitions: number): Promise<(LeaseHolder | undefined)[]> {
    if (partitions === 0) return [];
    const keys = Array.from({ length: partitions }, (_, p) => leaseKeys.lease(p, this.prefix));
    return (await this.redis.mget(...keys)).map(parseHolder);
  }

  async lock(ms: number): Promise<boolean> {
    const r = await this.scripts.vigilLock([
      leaseKeys.rebalance(this.prefix),
      this.instanceId,
      this.incarnation,
      ms,
    ]);
    return Number(r) === 1;
  }

  async unlock(): Promise<void> {
    await this.scripts.vigilUnlock([
      leaseKeys.rebalance(this.prefix),
      `${this.instanceId} ${this.incarnation}`,
    ]);
  }

  async close(): Promise<void> {
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}
