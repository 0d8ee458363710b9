import { Redis } from 'ioredis';
import type { CheckpointParts, RuleSetJSON } from '../../rules/index.js';
import { ErrorCode, VigilError } from '../../rules/index.js';
import { leaseKeys } from '../ownership/lease-store.js';
import { readHash } from './redis-hash-read.js';

/** What a store holds for one partition. */
export interface StoredCheckpoint {
  readonly offset: number;
  readonly controlSeq: number;
  readonly meta: string;
  /** Chunks of buffered events (format v4 on): `[field, text]`. */
  readonly buffered: Iterable<readonly [string, string]>;
  /** The lineage numbers the fields use (format v5): `[number, lineage]`. */
  readonly lineages: Iterable<readonly [number, string]>;
  /**
   * The keyed-state fields, to be read once: each is let go as it is read, so that a restore
   * does not keep the whole text of the partition alive while it builds the state from it (a
   * young-generation collection copies whatever is alive, and a restore runs many).
   */
  readonly fields: Iterable<readonly [string, string]>;
}

/**
 * Where partition checkpoints live. `save` is atomic and fenced: a write with a fencing token
 * older than the stored one, or an offset older than the stored one, is refused by the store.
 */
export interface CheckpointStore {
  load(partition: number): Promise<StoredCheckpoint | undefined>;
  /** The offset of the partition's checkpoint (0: none): one small read, ahead of `load`. */
  loadOffset(partition: number): Promise<number>;
  save(partition: number, parts: CheckpointParts, fence: number): Promise<void>;
  /**
   * Stores a rule set once per control sequence (a no-op when it is there already): `text` is
   * its {@link RuleSetJSON} as JSON (`ruleSetText`).
   */
  saveRuleSet(controlSeq: number, text: string): Promise<void>;
  loadRuleSet(controlSeq: number): Promise<RuleSetJSON | undefined>;
  /** The control sequence of each partition's checkpoint (0: none), partitions 0 … n − 1. */
  loadControlSeqs(partitions: number): Promise<number[]>;
  /**
   * The same store for the downstream partitions of key space `space` (the re-keying hop): their
   * own checkpoints, fenced by the lease of the event-log partition of the same number, whose
   * owner runs them. Rule sets are shared. Closing the view leaves the store open.
   */
  forSpace(space: string): CheckpointStore;
  close(): Promise<void>;
}

/** A checkpoint write refused because a newer owner or a newer checkpoint exists. */
export class CheckpointFencedError extends VigilError {
  override name = 'CheckpointFencedError';
  constructor(message: string) {
    super(ErrorCode.CheckpointFenced, message, { retryable: false });
  }
}

// Batched HSET and HDEL of ARGV[from..to]: one call per batch of fields rather than per field,
// since a call from Lua costs about as much as the write.
const LUA_BATCHES = `
local function hset(key, from, to)
  for i = from, to, 1000 do redis.call('HSET', key, unpack(ARGV, i, math.min(i + 999, to))) end
end
local function hdel(key, from, to)
  for i = from, to, 500 do redis.call('HDEL', key, unpack(ARGV, i, math.min(i + 499, to))) end
end
-- What both scripts write last, from ARGV[a] on: the buffered-event chunks written and released
-- (buffer hash), the lineage numbers given and let go (meta hash), then the meta. ARGV[c],
-- ARGV[c + 1] and ARGV[c + 2] count the chunks written, the chunks released and the numbers
-- given; the numbers let go are the rest.
local function writeRest(buffer, meta, c, a, fence, offset)
  local n = 2 * tonumber(ARGV[c])
  hset(buffer, a, a + n - 1)
  a = a + n
  n = tonumber(ARGV[c + 1])
  hdel(buffer, a, a + n - 1)
  a = a + n
  n = 2 * tonumber(ARGV[c + 2])
  hset(meta, a, a + n - 1)
  hdel(meta, a + n, #ARGV)
  redis.call('HSET', meta, 'fence', fence, 'offset', offset, 'controlSeq', ARGV[3], 'meta', ARGV[4])
end
`;

// One script, so the check and the write are one atomic step in Redis. The fencing token is
// checked twice: against the last token handed out for the partition (KEYS[3], see
// lease-store.ts; a write from an owner whose lease was taken over is refused even before the new
// owner writes), and against the token of the stored checkpoint.
// KEYS: meta hash, state hash, token counter, buffer hash.
// ARGV: fence, offset, controlSeq, meta, full, #upserts, #deletes, #buffered, #released,
// #lineages, upserts (field, value)…, deletes…, buffered chunks (field, value)…, released
// chunks…, lineage numbers (field, value)…, lineage numbers let go…
const SAVE = `${LUA_BATCHES}
local fence = tonumber(ARGV[1])
local offset = tonumber(ARGV[2])
local issued = tonumber(redis.call('GET', KEYS[3]) or '0')
if fence < issued then return redis.error_reply('VIGIL_FENCED fence ' .. fence .. ' is older than the lease token ' .. issued) end
local storedFence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if fence < storedFence then return redis.error_reply('VIGIL_FENCED fence ' .. fence .. ' is older than ' .. storedFence) end
local storedOffset = tonumber(redis.call('HGET', KEYS[1], 'offset') or '-1')
if fence == storedFence and offset < storedOffset then return redis.error_reply('VIGIL_FENCED offset ' .. offset .. ' is older than ' .. storedOffset) end
if ARGV[5] == '1' then redis.call('DEL', KEYS[2], KEYS[4]) end
local a = 11
local n = 2 * tonumber(ARGV[6])
hset(KEYS[2], a, a + n - 1)
a = a + n
n = tonumber(ARGV[7])
hdel(KEYS[2], a, a + n - 1)
writeRest(KEYS[4], KEYS[1], 8, a + n, fence, offset)
return 'OK'
`;

// A large checkpoint's keyed state is first written to staging keys in chunks (invisible to
// readers), then switched in by one script that checks the fence: atomic whatever its size. The
// chunk of buffered events (one field) and the lineage numbers come with the switch.
// KEYS: meta hash, state hash, staged upserts (hash), staged deletes (set), token counter, buffer hash.
// ARGV: fence, offset, controlSeq, meta, full, #buffered, #released, #lineages, buffered chunks
// (field, value)…, released chunks…, lineage numbers (field, value)…, lineage numbers let go…
const SAVE_STAGED = `${LUA_BATCHES}
local fence = tonumber(ARGV[1])
local offset = tonumber(ARGV[2])
local storedFence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
local storedOffset = tonumber(redis.call('HGET', KEYS[1], 'offset') or '-1')
local issued = tonumber(redis.call('GET', KEYS[5]) or '0')
if fence < issued or fence < storedFence or (fence == storedFence and offset < storedOffset) then
  redis.call('DEL', KEYS[3], KEYS[4])
  return redis.error_reply('VIGIL_FENCED fence ' .. fence .. ' offset ' .. offset .. ' is older than ' .. storedFence .. ' / ' .. storedOffset)
end
if ARGV[5] == '1' then
  redis.call('DEL', KEYS[2], KEYS[6])
  if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('RENAME', KEYS[3], KEYS[2]) end
else
  local kv = redis.call('HGETALL', KEYS[3])
  for i = 1, #kv, 2 do redis.call('HSET', KEYS[2], kv[i], kv[i + 1]) end
  for _, f in ipairs(redis.call('SMEMBERS', KEYS[4])) do redis.call('HDEL', KEYS[2], f) end
end
redis.call('DEL', KEYS[3], KEYS[4])
writeRest(KEYS[6], KEYS[1], 6, 9, fence, offset)
return 'OK'
`;

/** The meta hash's field for a lineage number (v5 checkpoints; see LineageIndex). */
const LINEAGE_FIELD = 'l:';

/** The (field, value) pairs of a flat HGETALL reply, each dropped from the reply once read. */
function* readOnce(flat: (string | undefined)[]): Generator<readonly [string, string]> {
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const pair = [flat[i] as string, flat[i + 1] as string] as const;
    flat[i] = flat[i + 1] = undefined;
    yield pair;
  }
  flat.length = 0;
}

/** Appends the lineage numbers given and let go as arguments (see SAVE). */
function pushLineages(args: (string | number)[], parts: CheckpointParts): void {
  for (const [n, sid] of parts.lineages) args.push(LINEAGE_FIELD + n, sid);
  for (const n of parts.lineagesRemoved) args.push(LINEAGE_FIELD + n);
}

/** `[number, lineage]` of the meta hash's lineage fields. */
function lineagesOf(meta: Record<string, string>): [number, string][] {
  const out: [number, string][] = [];
  for (const [f, v] of Object.entries(meta))
    if (f.startsWith(LINEAGE_FIELD)) out.push([Number(f.slice(LINEAGE_FIELD.length)), v]);
  return out;
}

/** Appends (field, value) pairs as arguments. */
function pushFields(
  args: (string | number)[],
  fields: readonly (readonly [string, string])[],
  from = 0,
  to = fields.length,
): void {
  for (let i = from; i < to; i++) {
    const [f, v] = fields[i] as readonly [string, string];
    args.push(f, v);
  }
}

/** Fields per command when staging a large checkpoint. */
const CHUNK = 2000;

/** Checkpoints in Redis: per partition a meta hash (with the lineage numbers), a keyed-state hash (incremental writes in place) and a hash of buffered-event chunks; rule sets once per sequence. */
export class RedisCheckpointStore implements CheckpointStore {
  private readonly redis: Redis;

  constructor(
    private readonly url: string,
    private readonly prefix = 'vigil:',
    /** A view's: the key space whose downstream partitions it stores, and the store's client. */
    private readonly view?: { readonly space: string; readonly redis: Redis },
  ) {
    if (view !== undefined) {
      this.redis = view.redis;
      return;
    }
    // Commands wait (offline queue) while Redis is away; the caller bounds how much work piles up.
    this.redis = new Redis(url, {
      lazyConnect: false,
      maxRetriesPerRequest: null,
      enableAutoPipelining: true,
    });
    this.redis.defineCommand('vigilSave', { numberOfKeys: 4, lua: SAVE });
    this.redis.defineCommand('vigilSaveStaged', { numberOfKeys: 6, lua: SAVE_STAGED });
    this.redis.on('error', () => {
      // Reconnects by itself; failures surface on the commands.
    });
  }

  forSpace(space: string): CheckpointStore {
    return new RedisCheckpointStore(this.url, this.prefix, { space, redis: this.redis });
  }

  /** The partition's three hashes in this view (see {@link checkpointKeys}). */
  private keys(p: number): [string, string, string] {
    return checkpointKeys(p, this.view?.space, this.prefix);
  }

  /** How log lines name the partition. */
  private named(p: number): string {
    return this.view === undefined
      ? `partition ${p}`
      : `partition ${p} of key space ${this.view.space}`;
  }

  async load(partition: number): Promise<StoredCheckpoint | undefined> {
    const [metaKey, stateKey, bufferKey] = this.keys(partition);
    // The state hash as Redis sends it (field, value, field, value, …), read by readHash on a
    // connection of its own: ioredis' hgetall would first build an object of a million
    // properties, and its parser costs about twice the CPU. No one else writes the partition
    // while this owner holds its lease, so the three reads see the same checkpoint.
    // (Joining the values into one text in a Lua script, to save the client a string per value,
    // cost Redis more than it saved: 5.8 s of its one thread for 1,000,000 keys instead of 1 s.)
    const [meta, buffered, flat] = await Promise.all([
      this.redis.hgetall(metaKey),
      this.redis.hgetall(bufferKey),
      readHash(this.url, stateKey),
    ]);
    if (meta.meta === undefined) return undefined;
    return {
      offset: Number(meta.offset),
      controlSeq: Number(meta.controlSeq),
      meta: meta.meta,
      buffered: Object.entries(buffered),
      fields: readOnce(flat),
      lineages: lineagesOf(meta),
    };
  }

  async save(partition: number, parts: CheckpointParts, fence: number): Promise<void> {
    const [metaKey, stateKey, bufferKey] = this.keys(partition);
    const tokenKey = leaseKeys.token(partition, this.prefix);
    const head = [fence, parts.offset, parts.controlSeq, parts.meta, parts.full ? '1' : '0'];
    const r = this.redis as unknown as Record<
      'vigilSave' | 'vigilSaveStaged',
      (args: (string | number)[]) => Promise<string>
    >;
    const { upserts, deletes, buffered, released } = parts;
    try {
      if (upserts.length + deletes.length <= CHUNK) {
        const args: (string | number)[] = [metaKey, stateKey, tokenKey, bufferKey];
        args.push(...head, upserts.length, deletes.length, buffered.length, released.length);
        args.push(parts.lineages.length);
        pushFields(args, upserts);
        for (const f of deletes) args.push(f);
        pushFields(args, buffered);
        for (const f of released) args.push(f);
        pushLineages(args, parts);
        await r.vigilSave(args);
        return;
      }
      const id = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
      const staged = `${stateKey}:staged:${id}`;
      const stagedDeletes = `${stateKey}:deleted:${id}`;
      const pipeline = this.redis.pipeline();
      for (let i = 0; i < upserts.length; i += CHUNK)
        pipeline.hset(staged, Object.fromEntries(upserts.slice(i, i + CHUNK)));
      for (let i = 0; i < deletes.length; i += CHUNK)
        pipeline.sadd(stagedDeletes, ...deletes.slice(i, i + CHUNK));
      // Staging keys of a writer that dies mid-way expire by themselves.
      pipeline.pexpire(staged, 600_000);
      pipeline.pexpire(stagedDeletes, 600_000);
      const results = await pipeline.exec();
      const failed = results?.find(([err]) => err !== null);
      if (failed) throw failed[0];
      const args: (string | number)[] = [metaKey, stateKey, staged, stagedDeletes];
      args.push(tokenKey, bufferKey, ...head, buffered.length, released.length);
      args.push(parts.lineages.length);
      pushFields(args, buffered);
      for (const f of released) args.push(f);
      pushLineages(args, parts);
      await r.vigilSaveStaged(args);
    } catch (e) {
      if (e instanceof Error && e.message.includes('VIGIL_FENCED'))
        throw new CheckpointFencedError(
          `checkpoint of ${this.named(partition)} refused: ${e.message}`,
        );
      throw e;
    }
  }

  async saveRuleSet(controlSeq: number, text: string): Promise<void> {
    await this.redis.set(`${this.prefix}ruleset:${controlSeq}`, text, 'NX');
  }

  async loadOffset(partition: number): Promise<number> {
    return Number((await this.redis.hget(this.keys(partition)[0], 'offset')) ?? 0) || 0;
  }

  async loadRuleSet(controlSeq: number): Promise<RuleSetJSON | undefined> {
    const v = await this.redis.get(`${this.prefix}ruleset:${controlSeq}`);
    return v === null ? undefined : (JSON.parse(v) as RuleSetJSON);
  }

  async loadControlSeqs(partitions: number): Promise<number[]> {
    const pipeline = this.redis.pipeline();
    for (let p = 0; p < partitions; p++) pipeline.hget(this.keys(p)[0], 'controlSeq');
    const results = (await pipeline.exec()) ?? [];
    return results.map(([err, v]) => {
      if (err) throw err;
      return Number(v ?? 0) || 0;
    });
  }

  async close(): Promise<void> {
    if (this.view !== undefined) return;
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}

/**
 * A partition's meta hash, keyed-state hash and buffered-events hash: `vigil:p:<p>…` for the
 * event log's partitions, `vigil:r:<space>:<p>…` for key space `space`'s.
 */
export function checkpointKeys(
  p: number,
  space: string | undefined,
  prefix = 'vigil:',
): [meta: string, state: string, buffer: string] {
  const meta = space === undefined ? `${prefix}p:${p}` : `${prefix}r:${space}:${p}`;
  return [meta, `${meta}:state`, `${meta}:buffer`];
}
