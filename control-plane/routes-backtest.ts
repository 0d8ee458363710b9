import type { Router } from 'express';
import { applyControl, emptyRuleSet, pointer, type RuleSet } from '../rules/index.js';
import type { ApiContext } from './context.js';
import { BacktestJobs, runBacktest, type BacktestJob, type BacktestRange } from './backtest.js';
import { ApiError, ApiErrorCode, invalid, notFound } from './errors.js';
import { route } from './http-support.js';

type Bound = { seq?: unknown; time?: unknown } | undefined;

function bound(b: Bound, name: 'from' | 'to'): { seq?: number; time?: number } {
  if (b === undefined) return {};
  if (typeof b !== 'object' || b === null)
    throw invalid('the back-test', [
      { pointer: `/${name}`, message: `${name} must be {"seq": n} or {"time": "<ISO-8601>"}` },
    ]);
  if (b.seq !== undefined) {
    if (!Number.isSafeInteger(b.seq) || (b.seq as number) < 1)
      throw invalid('the back-test', [
        { pointer: `/${name}/seq`, message: 'seq must be an EVENTS sequence (1 or more)' },
      ]);
    return { seq: b.seq as number };
  }
  const t =
    typeof b.time === 'string' ? Date.parse(b.time) : typeof b.time === 'number' ? b.time : NaN;
  if (!Number.isFinite(t))
    throw invalid('the back-test', [
      {
        pointer: `/${name}/time`,
        message: 'time must be ISO-8601 (e.g. 2026-12-01T10:00:00Z) or ms since the epoch',
      },
    ]);
  return { time: t };
}

/** The candidate: a whole rule set `{rules, models?}`, or `{changes}` applied to the rules in force now. */
function candidateOf(ctx: ApiContext, raw: unknown): RuleSet | undefined {
  if (raw === undefined) return undefined;
  const c = raw as { rules?: unknown; models?: unknown; changes?: unknown };
  const limits = ctx.options.limits;
  const outcome =
    c !== null && typeof c === 'object' && c.changes !== undefined
      ? applyControl(
          ctx.log().ruleSet,
          { op: 'changeset', changes: c.changes },
          ctx.log().seq + 1,
          limits,
        )
      : applyControl(
          emptyRuleSet(),
          { op: 'replace-all', rules: c?.rules, models: c?.models ?? [] },
          1,
          limits,
        );
  if (!outcome.ok)
    throw invalid(
      'the candidate',
      outcome.problems.map((p) => ({ ...p, pointer: pointer('/candidate') + p.pointer })),
    );
  return outcome.ruleSet;
}

function jobView(j: BacktestJob): Record<string, unknown> {
  return {
    id: j.id,
    status: j.status,
    progress: j.progress,
    startedAt: new Date(j.startedAt).toISOString(),
    ...(j.finishedAt === undefined ? {} : { finishedAt: new Date(j.finishedAt).toISOString() }),
    ...(j.error === undefined ? {} : { error: j.error }),
    ...(j.result === undefined ? {} : { result: j.result }),
  };
}

/** Back-tests: start (optionally waiting for the result), progress and result, cancel. */
export function mountBacktestRoutes(router: Router, ctx: ApiContext): BacktestJobs {
  const jobs = new BacktestJobs();
  route(router, 'post', '/backtest', 'write', async (req, res) => {
    const body = (req.body ?? {}) as {
      from?: Bound;
      to?: Bound;
      candidate?: unknown;
      wait?: unknown;
      maxAlerts?: unknown;
    };
    const from = bound(body.from, 'from');
    const to = bound(body.to, 'to');
    const range: BacktestRange = {
      ...(from.seq === undefined ? {} : { fromSeq: from.seq }),
      ...(from.time === undefined ? {} : { fromTime: from.time }),
      ...(to.seq === undefined ? {} : { toSeq: to.seq }),
      ...(to.time === undefined ? {} : { toTime: to.time }),
    };
    const maxAlerts = body.maxAlerts ?? 1000;
    if (
      !Number.isSafeInteger(maxAlerts) ||
      (maxAlerts as number) < 0 ||
      (maxAlerts as number) > 100_000
    )
      throw invalid('the back-test', [
        { pointer: '/maxAlerts', message: 'maxAlerts must be an integer from 0 to 100000' },
      ]);
    const candidate = candidateOf(ctx, body.candidate);
    if (jobs.running)
      throw new ApiError(
        ApiErrorCode.Conflict,
        'a back-test is running; wait for it or cancel it (DELETE /v1/backtest/<id>)',
      );
    const js = ctx.js();
    const jsm = ctx.jsm();
    const o = ctx.options;
    const job = jobs.start((onProgress, signal) =>
      runBacktest(
        js,
        jsm,
        {
          partitions: o.partitions,
          outOfOrderMs: o.outOfOrderMs,
          limits: o.limits,
          rekey: o.rekey,
        },
        {
          range,
          ...(candidate === undefined ? {} : { candidate }),
          maxRecords: o.maxBacktestRecords,
          maxAlerts: maxAlerts as number,
        },
        onProgress,
        signal,
      ),
    );
    if (body.wait === true) {
      // A client that hangs up cancels the run it waits for.
      res.on('close', () => {
        if (!res.writableFinished) job.abort.abort();
      });
      await job.done;
      // A run that did not finish answers in the one error shape, the job in details, so a
      // client that only looks at `error` sees it failed; cancelled is a conflict with the
      // DELETE that stopped it, not a server fault.
      if (job.status === 'cancelled')
        throw new ApiError(
          ApiErrorCode.BacktestCancelled,
          `back-test ${job.id} was cancelled before it finished`,
          { details: { job: jobView(job) } },
        );
      if (job.status !== 'done')
        throw new ApiError(
          ApiErrorCode.Internal,
          `back-test ${job.id} failed: ${job.error ?? 'unknown error'}`,
          { details: { job: jobView(job) } },
        );
      res.status(200).json(jobView(job));
      return;
    }
    res.status(202).set('Location', `/v1/backtest/${job.id}`).json(jobView(job));
  });
  route(router, 'get', '/backtest/:id', 'read', (req, res) => {
    const job = jobs.get(req.params.id as string);
    if (job === undefined) throw notFound('backtest', req.params.id as string);
    res.json(jobView(job));
  });
  route(router, 'delete', '/backtest/:id', 'write', async (req, res) => {
    const job = jobs.get(req.params.id as string);
    if (job === undefined) throw notFound('backtest', req.params.id as string);
    job.abort.abort();
    await job.done;
    res.json(jobView(job));
  });
  return jobs;
}
