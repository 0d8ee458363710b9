import { randomUUID } from 'node:crypto';
import express, {
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
  type Router,
} from 'express';
import type { ChangeMeta } from '../rules/index.js';
import { principalOf, requireRole } from './auth.js';
import type { Role } from './options.js';
import { ApiError, ApiErrorCode, invalid } from './errors.js';

/**
 * The headers helmet sets by default that make sense for a JSON API, set by hand (no dependency):
 * no sniffing, no framing, no referrer, nothing cached, and a CSP that allows nothing to load.
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'Content-Security-Policy': "default-src 'none'; frame-ancestors 'none'",
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Resource-Policy': 'same-origin',
  'Origin-Agent-Cluster': '?1',
  'Referrer-Policy': 'no-referrer',
  'Strict-Transport-Security': 'max-age=15552000; includeSubDomains',
  'X-Content-Type-Options': 'nosniff',
  'X-DNS-Prefetch-Control': 'off',
  'X-Download-Options': 'noopen',
  'X-Frame-Options': 'DENY',
  'X-Permitted-Cross-Domain-Policies': 'none',
  'X-XSS-Protection': '0',
  'Cache-Control': 'no-store',
};

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Sets the security headers and a request id (the client's `X-Request-Id` when it is sane). */
export function baseHeaders(req: Request, res: Response, next: NextFunction): void {
  res.set(SECURITY_HEADERS);
  const given = req.get('x-request-id');
  const id = given !== undefined && REQUEST_ID.test(given) ? given : randomUUID();
  res.locals.requestId = id;
  res.set('X-Request-Id', id);
  next();
}

/** A JSON body parser with a size limit; anything but JSON is refused with 415. */
export function jsonBody(limitBytes: number): RequestHandler {
  const parse = express.json({ limit: limitBytes, strict: false });
  return (req, res, next) => {
    const hasBody =
      req.headers['transfer-encoding'] !== undefined ||
      (req.headers['content-length'] !== undefined && req.headers['content-length'] !== '0');
    if (hasBody && !req.is('application/json'))
      return next(
        new ApiError(
          ApiErrorCode.UnsupportedMedia,
          'send JSON with "Content-Type: application/json"',
        ),
      );
    parse(req, res, next);
  };
}

/** A route's handler: it may be async (a rejection reaches the error handler). */
export type RouteHandler = (req: Request, res: Response) => Promise<void> | void;

/** Mounts one route that callers with at least `role` may call. */
export function route(
  router: Router,
  method: 'get' | 'put' | 'post' | 'delete',
  path: string,
  role: Role,
  fn: RouteHandler,
): void {
  router[method](path, requireRole(role), handle(fn));
}

/** Wraps an async handler so a rejection reaches the error handler. */
export function handle(fn: RouteHandler): RequestHandler {
  return (req, res, next) => {
    Promise.resolve()
      .then(() => fn(req, res))
      .catch(next);
  };
}

/** The `meta` of a change: who (the token's name), why (`X-Vigil-Reason` or body `reason`), which request. */
export function changeMeta(req: Request, res: Response): ChangeMeta {
  const body = req.body as { reason?: unknown } | undefined;
  const fromBody =
    typeof body === 'object' && body !== null && typeof body.reason === 'string'
      ? body.reason
      : undefined;
  const reason = req.get('x-vigil-reason') ?? fromBody;
  if (reason !== undefined && reason.length > 1000)
    throw new ApiError(ApiErrorCode.BadRequest, 'reason is limited to 1,000 characters');
  return {
    actor: principalOf(res).name,
    ...(reason === undefined || reason === '' ? {} : { reason }),
    requestId: res.locals.requestId as string,
  };
}

/**
 * The version a change expects: a non-negative integer (0: "must not exist"), or `'*'`: "must
 * exist" (HTTP's `If-Match: *`).
 */
export type ExpectedVersion = number | '*';

/**
 * A number given as a JSON number or as a string of digits (a query parameter, a header); NaN for
 * anything else, so that one range check refuses both a bad type and a bad value.
 */
export function digitsOf(raw: unknown): number {
  return typeof raw === 'number'
    ? raw
    : typeof raw === 'string' && /^\d+$/.test(raw)
      ? Number(raw)
      : NaN;
}

/**
 * An integer setting of a request (query parameter or body field) from `min` to `max`;
 * `fallback` when it is absent or empty; 400 naming it otherwise.
 */
export function queryInt(
  raw: unknown,
  name: string,
  min: number,
  max: number,
  fallback: number,
  hint = '',
): number {
  if (raw === undefined || raw === '') return fallback;
  const n = digitsOf(raw);
  if (!Number.isSafeInteger(n) || n < min || n > max)
    throw new ApiError(
      ApiErrorCode.BadRequest,
      `${name} must be an integer from ${min} to ${max}${hint}`,
      { details: { [name]: raw } },
    );
  return n;
}

/**
 * Parses an expected version as given in `If-Match` or a body's `expectedVersion`: an integer or
 * a string of digits, or `*`. One parser for every route and for each change of a changeset, so
 * `"3"` means 3 everywhere and `-1` is 400 everywhere.
 */
export function parseExpectedVersion(
  raw: unknown,
  where = 'the expected version (If-Match or expectedVersion)',
): ExpectedVersion | undefined {
  if (raw === undefined) return undefined;
  if (raw === '*') return '*';
  const n = digitsOf(raw);
  if (!Number.isSafeInteger(n) || n < 0)
    throw new ApiError(
      ApiErrorCode.BadRequest,
      `${where} must be a non-negative integer, e.g. If-Match: "42"`,
      { details: { expectedVersion: raw } },
    );
  return n;
}

/** The version a change expects: `If-Match: "<n>"` or body `expectedVersion`; 0 means "must not exist". */
export function expectedVersion(req: Request): ExpectedVersion | undefined {
  const header = req.get('if-match');
  const body = req.body as { expectedVersion?: unknown } | undefined;
  const raw =
    header !== undefined
      ? header
          .trim()
          .replace(/^W\//, '')
          .replace(/^"(.*)"$/, '$1')
      : typeof body === 'object' && body !== null
        ? body.expectedVersion
        : undefined;
  return parseExpectedVersion(raw);
}

/** The one error shape, `{error: {code, message, details}}`, for every failure; no stack traces. */
export function errorHandler(log: (message: string) => void) {
  // Express recognises an error handler by its four parameters.
  return (err: unknown, _req: Request, res: Response, _next: NextFunction): void => {
    let e: ApiError;
    if (err instanceof ApiError) e = err;
    else if (isBodyError(err)) {
      e =
        err.type === 'entity.too.large'
          ? new ApiError(
              ApiErrorCode.TooLarge,
              `the body is over the limit of ${err.limit} bytes`,
              {
                details: { limit: err.limit },
              },
            )
          : err.type === 'entity.parse.failed'
            ? new ApiError(ApiErrorCode.BadRequest, 'the body is not valid JSON')
            : clientStatus(err) === 415
              ? // body-parser's charset.unsupported and encoding.unsupported: the media type is wrong.
                new ApiError(
                  ApiErrorCode.UnsupportedMedia,
                  `the body's charset or encoding is not supported (${err.type}); send UTF-8 JSON`,
                )
              : new ApiError(ApiErrorCode.BadRequest, `the body could not be read (${err.type})`);
    } else if (err instanceof URIError || clientStatus(err) !== undefined) {
      // Express marks what the client got wrong (e.g. a path that is not valid percent-encoding,
      // a URIError with status 400); that is the client's mistake, not ours, and needs no log line.
      e = new ApiError(
        ApiErrorCode.BadRequest,
        err instanceof URIError
          ? `the request is malformed: ${err.message}`
          : 'the request is malformed',
      );
    } else {
      log(`internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
      e = new ApiError(ApiErrorCode.Internal, 'internal error; the service log has the details', {
        details: { requestId: res.locals.requestId as string },
      });
    }
    if (res.headersSent) return;
    res.set(SECURITY_HEADERS);
    res.status(e.status).json(e.toBody());
  };
}

/** The 4xx status an error from Express or body-parser carries (`status` or `statusCode`), if any. */
function clientStatus(e: unknown): number | undefined {
  if (typeof e !== 'object' || e === null) return undefined;
  const { status, statusCode } = e as { status?: unknown; statusCode?: unknown };
  const s = typeof status === 'number' ? status : statusCode;
  return typeof s === 'number' && s >= 400 && s < 500 ? s : undefined;
}

function isBodyError(e: unknown): e is { type: string; limit?: number } {
  return typeof e === 'object' && e !== null && typeof (e as { type?: unknown }).type === 'string';
}

/**
 * The body of a PUT of a rule or model: the thing itself, or `{<kind>, expectedVersion?,
 * reason?}` (those two are read from the body elsewhere and are not part of the thing). Its `id`,
 * when given, must be the URL's; the result carries the URL's.
 */
export function entityFromBody(
  req: Request,
  kind: 'rule' | 'model',
  id: string,
): Record<string, unknown> & { id: string } {
  const body = req.body as Record<string, unknown> | undefined;
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw invalid(`the ${kind}`, [{ pointer: '', message: `send the ${kind} as a JSON object` }]);
  const raw = (Object.hasOwn(body, kind) ? body[kind] : body) as Record<string, unknown>;
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw invalid(`the ${kind}`, [
      { pointer: `/${kind}`, message: `${kind} must be a JSON object` },
    ]);
  const { expectedVersion: _e, reason: _r, ...entity } = raw;
  if (entity.id !== undefined && entity.id !== id)
    throw invalid(`the ${kind}`, [
      {
        pointer: '/id',
        message: `the ${kind}'s id "${String(entity.id)}" differs from the URL's "${id}"; make them equal`,
      },
    ]);
  return { ...entity, id };
}
