import type { Router } from 'express';
import { principalOf } from './auth.js';
import type { ApiContext } from './context.js';
import {
  letterView,
  parseBound,
  parseFilter,
  parseListQuery,
  type DlqFilter,
} from './dlq-letter.js';
import { DlqReader, type ReplaySelection } from './dlq-reader.js';
import { replayLetters, replayReport, type ReplayOutcome } from './dlq-replay.js';
import { ApiError, ApiErrorCode } from './errors.js';
import { route } from './http-support.js';

/** Most full payloads one listing carries (bytes); letters past it show their preview only. */
const PAYLOAD_BUDGET = 16 * 1024 * 1024;
/** Most letters one replay selects. */
const MAX_REPLAY = 10_000;

function replaySelection(body: unknown, now: number): ReplaySelection {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new ApiError(
      ApiErrorCode.BadRequest,
      'send {"seqs": [n, …]} or {"reason", "rule"?, "since"?, "until"?, "limit"?}, with "dryRun"?',
    );
  const b = body as Record<string, unknown>;
  if (b.dryRun !== undefined && typeof b.dryRun !== 'boolean')
    throw new ApiError(ApiErrorCode.BadRequest, 'dryRun must be true or false');
  if (b.seqs !== undefined) {
    if (['reason', 'rule', 'since', 'until', 'after'].some((k) => b[k] !== undefined))
      throw new ApiError(
        ApiErrorCode.BadRequest,
        'give seqs or a filter (reason, rule, since, until), not both',
      );
    const seqs = b.seqs;
    if (
      !Array.isArray(seqs) ||
      seqs.length === 0 ||
      seqs.length > 1000 ||
      !seqs.every((s) => Number.isSafeInteger(s) && (s as number) > 0)
    )
      throw new ApiError(
        ApiErrorCode.BadRequest,
        'seqs must be a list of 1 to 1000 DLQ sequences (positive integers)',
        { details: { seqs } },
      );
    return { kind: 'seqs', seqs: seqs as number[] };
  }
  const filter: DlqFilter = parseFilter(b, now);
  if (filter.reason === undefined && filter.rule === undefined)
    throw new ApiError(
      ApiErrorCode.BadRequest,
      'name what to replay: seqs, or a reason or a rule (and optionally since, until, limit); replaying every dead letter at once is not offered',
    );
  const limit = b.limit ?? 1000;
  if (!Number.isSafeInteger(limit) || (limit as number) < 1 || (limit as number) > MAX_REPLAY)
    throw new ApiError(ApiErrorCode.BadRequest, `limit must be an integer from 1 to ${MAX_REPLAY}`);
  return { kind: 'filter', filter, limit: limit as number };
}

/** NATS gone (the process stopping, a lost connection) is 503, worth a retry, not a fault here. */
async function nats<T>(p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (e) {
    const name = e instanceof Error ? e.name : '';
    if (/^(ClosedConnectionError|DrainingConnectionError|ConnectionError|TimeoutError)$/.test(name))
      throw new ApiError(
        ApiErrorCode.Unavailable,
        `NATS did not answer (${(e as Error).message}); try again`,
        { cause: e },
      );
    throw e;
  }
}

/**
 * Dead letters: list (and follow, by long poll), counts per reason, and replay to their source
 * subjects. `log` records who replayed what.
 */
export function mountDlqRoutes(
  router: Router,
  ctx: ApiContext,
  log: (message: string) => void,
): void {
  let reader: { js: unknown; dlq: DlqReader } | undefined;
  const dlq = (): DlqReader => {
    const js = ctx.js();
    // One reader per connection: the control plane connects again when started again.
    if (reader?.js !== js) reader = { js, dlq: new DlqReader(js, ctx.jsm()) };
    return reader.dlq;
  };

  route(router, 'get', '/dlq', 'read', async (req, res) => {
    const q = parseListQuery(req.query as Record<string, unknown>, Date.now());
    // A long poll ends early when the client hangs up.
    const gone = new AbortController();
    res.on('close', () => gone.abort());
    const page = await nats(dlq().list(q, gone.signal));
    if (res.destroyed) return;
    let budget = PAYLOAD_BUDGET;
    res.json({
      letters: page.letters.map((l) => {
        const withPayload = q.payload !== 'none' && l.size <= budget;
        if (withPayload) budget -= l.size;
        return {
          ...letterView(l, withPayload ? q.payload : 'none'),
          ...(q.payload !== 'none' && !withPayload ? { payloadOmitted: true } : {}),
        };
      }),
      cursor: page.cursor,
      more: page.more,
      firstSeq: page.state.firstSeq,
      lastSeq: page.state.lastSeq,
    });
  });

  route(router, 'get', '/dlq/stats', 'read', async (req, res) => {
    const now = Date.now();
    const since = parseBound(req.query.since, 'since', now);
    const s = await nats(dlq().stats(since));
    res.json({
      since:
        since === undefined
          ? null
          : since.kind === 'time'
            ? new Date(since.time).toISOString()
            : { seq: since.seq },
      until: new Date(now).toISOString(),
      ...s,
    });
  });

  route(router, 'post', '/dlq/replay', 'write', async (req, res) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const sel = replaySelection(body, Date.now());
    const dryRun = body.dryRun === true;
    const r = dlq();
    const { letters, missing, more, cursor } = await nats(r.select(sel));
    const missed = missing.map((seq): ReplayOutcome => ({
      seq,
      outcome: 'failed',
      error: `DLQ holds no dead letter at sequence ${seq}`,
    }));
    const report = replayReport(
      [...missed, ...(await replayLetters(ctx.js(), letters, dryRun))],
      dryRun,
      more,
      cursor,
    );
    if (!dryRun) {
      const seqs = report.results.map((x) => x.seq);
      log(
        `dlq replay by ${principalOf(res).name} (request ${String(res.locals.requestId)}): ${report.replayed} replayed, ${report.duplicates} duplicates, ${report.failed} failed of ${report.selected} selected (DLQ ${seqs.slice(0, 20).join(',')}${seqs.length > 20 ? ',…' : ''})`,
      );
    }
    res.json(report);
  });
}
