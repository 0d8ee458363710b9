import { connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { ServiceError, ServiceErrorCode } from '../errors.js';

/**
 * Reads a whole Redis hash (`HGETALL`) over a connection of its own, parsing the reply in one
 * pass: a restore reads one hash of tens of thousands of fields per partition, and ioredis'
 * parser spent much more CPU on it, turning each field into a Buffer and then into a string
 * (bench/README.md). Everything else stays on ioredis.
 *
 * `url` is a `redis://` or `rediss://` URL as ioredis takes it: optional user and password,
 * optional database number as the path. Resolves the flat reply, field, value, field, value, …
 * (empty when the key does not exist).
 */
export function readHash(url: string, key: string, timeoutMs = 30_000): Promise<string[]> {
  const target = parseRedisUrl(url);
  const commands: string[][] = [];
  // As ioredis: redis://:password@host authenticates with the password alone, redis://user:password@host as an ACL user.
  if (target.password !== undefined)
    commands.push(
      target.username === undefined
        ? ['AUTH', target.password]
        : ['AUTH', target.username, target.password],
    );
  if (target.db !== 0) commands.push(['SELECT', String(target.db)]);
  commands.push(['HGETALL', key]);
  return new Promise<string[]>((resolve, reject) => {
    const socket: Socket = target.tls
      ? tlsConnect({ host: target.host, port: target.port, servername: target.host })
      : netConnect({ host: target.host, port: target.port });
    let settled = false;
    const fail = (e: unknown): void => {
      if (settled) return;
      settled = true;
      socket.destroy();
      reject(
        new ServiceError(
          ServiceErrorCode.Redis,
          `reading hash ${key} from Redis at ${target.host}:${target.port} failed: ${(e as Error).message}`,
          {
            retryable: e instanceof RedisReplyError ? e.retryable : !isCertificateError(e),
            cause: e,
          },
        ),
      );
    };
    socket.setTimeout(timeoutMs, () => fail(new Error(`no reply within ${timeoutMs} ms`)));
    socket.on('error', fail);
    socket.on('close', () => fail(new Error('connection closed before the reply')));
    const parser = new ReplyParser(commands.length - 1);
    socket.on('data', (chunk: Buffer) => {
      try {
        const done = parser.push(chunk);
        if (done !== undefined && !settled) {
          settled = true;
          socket.destroy();
          resolve(done);
        }
      } catch (e) {
        fail(e);
      }
    });
    socket.write(commands.map(encodeCommand).join(''));
  });
}

/** A TLS handshake that failed on the server's certificate: the same certificate fails again. */
function isCertificateError(e: unknown): boolean {
  const code = (e as { code?: unknown }).code;
  return typeof code === 'string' && /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|ALTNAME/.test(code);
}

/**
 * An error reply from Redis. Asking again helps only when the server says it is not ready yet:
 * loading its data after a restart, or busy with a script (ioredis waits these out on its own
 * connection); `-ERR …`, `-WRONGPASS …` or `-WRONGTYPE …` come back the same.
 */
class RedisReplyError extends Error {
  override name = 'RedisReplyError';
  readonly retryable: boolean;
  constructor(message: string) {
    super(message);
    this.retryable = /^(LOADING|BUSY|TRYAGAIN|MASTERDOWN)\b/.test(message);
  }
}

interface RedisTarget {
  readonly host: string;
  readonly port: number;
  readonly tls: boolean;
  readonly username: string | undefined;
  readonly password: string | undefined;
  readonly db: number;
}

function parseRedisUrl(url: string): RedisTarget {
  const u = new URL(url);
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:')
    throw new ServiceError(
      ServiceErrorCode.Config,
      `redisUrl must start with redis:// or rediss://, got ${u.protocol}`,
    );
  const db = u.pathname.length > 1 ? Number(u.pathname.slice(1)) : 0;
  if (!Number.isSafeInteger(db) || db < 0)
    throw new ServiceError(
      ServiceErrorCode.Config,
      `redisUrl's path must be a database number such as /0, got ${u.pathname}`,
    );
  return {
    host: u.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1',
    port: u.port === '' ? 6379 : Number(u.port),
    tls: u.protocol === 'rediss:',
    username: u.username === '' ? undefined : decodeURIComponent(u.username),
    password: u.password === '' ? undefined : decodeURIComponent(u.password),
    db,
  };
}

function encodeCommand(args: readonly string[]): string {
  let out = `*${args.length}\r\n`;
  for (const a of args) out += `$${Buffer.byteLength(a)}\r\n${a}\r\n`;
  return out;
}

const CR = 13;
/** `Buffer.prototype.utf8Slice`: the decoding `toString('utf8', …)` ends in, without its checks. */
type Utf8Slicer = { utf8Slice(start: number, end: number): string };

/**
 * The status replies (`+OK`) to AUTH and SELECT, then the array of bulk strings HGETALL answers,
 * read across chunks: what is not complete yet waits in `rest` (one field at most, so the copies
 * stay small).
 */
export class ReplyParser {
  private rest: Buffer | undefined;
  private out: string[] | undefined;
  private filled = 0;

  /** `statusReplies`: replies (`+OK`) to the commands sent before the one answered by the array. */
  constructor(private statusReplies: number) {}

  /** Takes the next chunk; returns the array once it is complete. */
  push(chunk: Buffer): string[] | undefined {
    const buf = this.rest === undefined ? chunk : Buffer.concat([this.rest, chunk]);
    let i = 0;
    while (this.out === undefined) {
      const cr = buf.indexOf(CR, i);
      if (cr < 0 || cr + 1 >= buf.length) break;
      const type = buf[i];
      const text = buf.toString('utf8', i + 1, cr);
      i = cr + 2;
      if (type === 0x2d /* - */) throw new RedisReplyError(text);
      if (this.statusReplies > 0) {
        if (type !== 0x2b /* + */) throw new RedisReplyError(`unexpected reply ${text}`);
        this.statusReplies--;
      } else {
        if (type !== 0x2a /* * */) throw new RedisReplyError(`expected an array, got ${text}`);
        const n = Number(text);
        this.out = n > 0 ? new Array<string>(n) : [];
      }
    }
    const out = this.out;
    if (out !== undefined) {
      const slicer = buf as unknown as Utf8Slicer;
      while (this.filled < out.length && i < buf.length) {
        if (buf[i] !== 0x24 /* $ */) throw new RedisReplyError('expected a bulk string');
        // The length, digit by digit: this runs once per field and value.
        let len = 0;
        let j = i + 1;
        let b = buf[j];
        while (b !== undefined && b !== CR) {
          len = len * 10 + (b - 48);
          b = buf[++j];
        }
        const start = j + 2;
        if (b === undefined || start + len + 2 > buf.length) break;
        out[this.filled++] = slicer.utf8Slice(start, start + len);
        i = start + len + 2;
      }
      if (this.filled === out.length) return out;
    }
    this.rest = i < buf.length ? buf.subarray(i) : undefined;
    return undefined;
  }
}
