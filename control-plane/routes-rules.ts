import type { Request, Response, Router } from 'express';
import {
  applyControl,
  keyCoverage,
  type CompiledRule,
  type ControlChange,
  type ControlMessage,
  type Rule,
} from '../rules/index.js';
import {
  changeStamp,
  changeView,
  checkRuleVersion,
  commitVersioned,
  revisionsOf,
} from './context.js';
import type { ApiContext } from './context.js';
import type { ControlLog, RuleRevision } from './control-log.js';
import { ApiError, ApiErrorCode, invalid, notFound } from './errors.js';
import {
  changeMeta,
  entityFromBody,
  parseExpectedVersion,
  queryInt,
  route,
} from './http-support.js';
import type { ExpectedVersion, RouteHandler } from './http-support.js';
import { recentEvents, type SampledEvent } from './event-sample.js';
import { jsonDiff } from './json-diff.js';
import { checkModelVersion } from './routes-models.js';

function lastChange(log: ControlLog, id: string): Record<string, unknown> | undefined {
  const last = log.ruleHistory(id).at(-1);
  return last === undefined ? undefined : revisionSummary(last);
}

function revisionSummary(r: RuleRevision): Record<string, unknown> {
  return {
    ...changeStamp(r),
    action: r.action,
    ...(r.stateReason === undefined ? {} : { stateReason: r.stateReason }),
    ...r.meta,
  };
}

/** A rule as the API shows it: definition, state, version and the last change that touched it. */
export function ruleView(
  log: ControlLog,
  r: CompiledRule,
  withDef = true,
): Record<string, unknown> {
  return {
    id: r.id,
    state: r.paused ? 'paused' : 'active',
    version: r.version,
    stateEpoch: r.stateEpoch,
    ...(r.def.description === undefined ? {} : { description: r.def.description }),
    on: r.def.on,
    severity: r.severity,
    lastChange: lastChange(log, r.id),
    ...(withDef ? { rule: r.def } : {}),
  };
}

function currentRule(ctx: ApiContext, id: string): CompiledRule {
  const r = ctx.log().ruleSet.rules.get(id);
  if (r === undefined) throw notFound('rule', id);
  return r;
}

/** The body of a PUT: the rule itself, or `{rule, expectedVersion?, reason?}`. */
function ruleFromBody(req: Request, id: string): Rule {
  return entityFromBody(req, 'rule', id) as unknown as Rule;
}

function respondRule(
  ctx: ApiContext,
  res: Response,
  id: string,
  status: number,
  seq: number,
): void {
  const r = ctx.log().ruleSet.rules.get(id);
  if (r !== undefined) res.set('ETag', `"${r.version}"`);
  const record = ctx.log().record(seq);
  res.status(status).json({
    ...(r === undefined ? { id, deleted: true } : ruleView(ctx.log(), r)),
    change: record === undefined ? { seq } : changeView(record),
  });
}

/** The ops whose `expectedVersion` is a rule's version, and those whose is a model's. */
const RULE_OPS: ReadonlySet<unknown> = new Set([
  'upsert-rule',
  'delete-rule',
  'pause-rule',
  'resume-rule',
]);
const MODEL_OPS: ReadonlySet<unknown> = new Set(['upsert-model', 'delete-model']);

/**
 * What a changeset's change `i` expects: the version of the rule or model it names. 400 for a
 * value the PUT routes would refuse, and for an op where a version means nothing (clear-state,
 * replace-all: use `expectedControlSeq`). A change without an id is left to validation (422).
 */
function versionCheck(
  c: unknown,
  i: number,
): { kind: 'rule' | 'model'; id: string; expected: ExpectedVersion } | undefined {
  if (typeof c !== 'object' || c === null) return undefined;
  const change = c as Record<string, unknown>;
  const expected = parseExpectedVersion(change.expectedVersion, `changes[${i}].expectedVersion`);
  if (expected === undefined) return undefined;
  const kind = RULE_OPS.has(change.op) ? 'rule' : MODEL_OPS.has(change.op) ? 'model' : undefined;
  if (kind === undefined)
    throw new ApiError(
      ApiErrorCode.BadRequest,
      `changes[${i}].expectedVersion means nothing for op ${JSON.stringify(change.op)}: only rule and model changes have a version; use expectedControlSeq to expect the whole rule set unchanged`,
      { details: { index: i, op: change.op } },
    );
  const named = change[kind] as { id?: unknown } | undefined;
  const id =
    change.op === 'upsert-rule' || change.op === 'upsert-model'
      ? typeof named === 'object' && named !== null
        ? named.id
        : undefined
      : change.id;
  return typeof id === 'string' ? { kind, id, expected } : undefined;
}

/** Rules: list, get, put, delete, pause, resume, history, diff, rollback, validate, changesets. */
/** Records of `EVENTS` a validation samples for warnings (`?sample=`). */
const DEFAULT_SAMPLE = 1000;
const MAX_SAMPLE = 100_000;

export function mountRuleRoutes(router: Router, ctx: ApiContext): void {
  route(router, 'get', '/rules', 'read', (_req, res) => {
    const log = ctx.log();
    const rules = [...log.ruleSet.rules.values()]
      .sort((a, b) => (a.id < b.id ? -1 : 1))
      .map((r) => ruleView(log, r, false));
    res.json({ controlSeq: log.seq, rules });
  });

  route(router, 'post', '/rules/validate', 'read', async (req, res) => {
    const sample = queryInt(
      req.query.sample,
      'sample',
      0,
      MAX_SAMPLE,
      DEFAULT_SAMPLE,
      ` (0: no sample), the last records of EVENTS to check the rule against; default ${DEFAULT_SAMPLE}`,
    );
    const body = req.body as Record<string, unknown> | undefined;
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      throw invalid('the body', [
        { pointer: '', message: 'send a rule, {"rule": …} or {"message": <control message>}' },
      ]);
    const message: unknown = Object.hasOwn(body, 'message')
      ? body.message
      : { op: 'upsert-rule', rule: Object.hasOwn(body, 'rule') ? body.rule : body };
    const rs = ctx.log().ruleSet;
    const outcome = applyControl(rs, message, rs.controlSeq + 1, ctx.options.limits);
    if (!outcome.ok) throw invalid('the change', outcome.problems);
    // The sample only adds warnings: without NATS the rule is still judged, without them.
    let events: SampledEvent[] = [];
    let sampleError: string | undefined;
    if (sample > 0)
      try {
        events = await recentEvents(ctx.js(), ctx.jsm(), ctx.options.partitions, sample);
      } catch (e) {
        sampleError = `EVENTS could not be sampled: ${(e as Error).message}`;
      }
    const ids = [...new Set(outcome.changes.map((c) => c.ruleId))];
    const warnings = keyCoverage(outcome.ruleSet, ids, events, ctx.options.limits)
      .filter((c) => c.keyMissing > 0)
      .map((c) => ({
        ruleId: c.ruleId,
        pointer: '/key',
        message: `in the last ${events.length} events of EVENTS, ${c.keyMissing} of the ${c.ofItsTypes} of its types lack the key field${c.keyFields.length > 1 ? 's' : ''} "${c.keyFields.join('", "')}" (or hold neither a string nor a number in ${c.keyFields.length > 1 ? 'one of them' : 'it'}): the rule judges none of those; check the field's name, or key the rule by a field its events carry`,
      }));
    res.json({
      valid: true,
      changes: outcome.changes,
      sample: {
        events: events.length,
        ...(sampleError === undefined ? {} : { error: sampleError }),
      },
      warnings,
    });
  });

  route(router, 'get', '/rules/:id', 'read', (req, res) => {
    const r = currentRule(ctx, req.params.id as string);
    res.set('ETag', `"${r.version}"`).json(ruleView(ctx.log(), r));
  });

  route(router, 'put', '/rules/:id', 'write', async (req, res) => {
    const id = req.params.id as string;
    const rule = ruleFromBody(req, id);
    const record = await commitVersioned(ctx, req, res, 'the rule', (rs, expected) => {
      checkRuleVersion(rs, id, expected);
      return { op: 'upsert-rule', rule };
    });
    const created = record.changes.some((c) => c.ruleId === id && c.action === 'created');
    respondRule(ctx, res, id, created ? 201 : 200, record.seq);
  });

  const simple =
    (op: 'delete-rule' | 'pause-rule' | 'resume-rule', path: string): RouteHandler =>
    async (req, res) => {
      const id = req.params.id as string;
      currentRule(ctx, id);
      const record = await commitVersioned(
        ctx,
        req,
        res,
        `${path} of rule "${id}"`,
        (rs, expected) => {
          if (!rs.rules.has(id)) throw notFound('rule', id);
          checkRuleVersion(rs, id, expected);
          return { op, id };
        },
      );
      respondRule(ctx, res, id, 200, record.seq);
    };
  route(router, 'delete', '/rules/:id', 'write', simple('delete-rule', 'delete'));
  route(router, 'post', '/rules/:id/pause', 'write', simple('pause-rule', 'pause'));
  route(router, 'post', '/rules/:id/resume', 'write', simple('resume-rule', 'resume'));

  route(router, 'get', '/rules/:id/history', 'read', (req, res) => {
    const id = req.params.id as string;
    const history = revisionsOf('rule', id, ctx.log().ruleHistory(id));
    let previous: Rule | undefined;
    const revisions = history.map((h) => {
      const diff = jsonDiff(previous, h.rule);
      previous = h.rule;
      return {
        ...revisionSummary(h),
        version: h.version ?? null,
        state: h.rule === undefined ? 'deleted' : h.paused ? 'paused' : 'active',
        rule: h.rule ?? null,
        diff,
      };
    });
    res.json({ id, revisions });
  });

  route(router, 'get', '/rules/:id/diff', 'read', (req, res) => {
    const id = req.params.id as string;
    const history = revisionsOf('rule', id, ctx.log().ruleHistory(id));
    const versions = [...new Set(history.map((h) => h.version).filter((v) => v !== undefined))];
    const at = (name: 'from' | 'to', fallback: number | undefined): number | undefined => {
      const q = req.query[name];
      if (q === undefined) return fallback;
      if (typeof q !== 'string' || !/^\d+$/.test(q))
        throw new ApiError(ApiErrorCode.BadRequest, `${name} must be a version number`);
      return Number(q);
    };
    const to = at('to', ctx.log().ruleSet.rules.get(id)?.version ?? versions.at(-1));
    const from = at('from', versions.filter((v) => to === undefined || v < to).at(-1));
    const def = (v: number | undefined): Rule | undefined => {
      if (v === undefined) return undefined;
      const h = history.find((x) => x.version === v && x.rule !== undefined);
      if (h === undefined) throw notFound('version', `${id}@${v}`);
      return h.rule;
    };
    res.json({ id, from: from ?? null, to: to ?? null, diff: jsonDiff(def(from), def(to)) });
  });

  route(router, 'post', '/rules/:id/rollback', 'write', async (req, res) => {
    const id = req.params.id as string;
    const body = (req.body ?? {}) as { version?: unknown };
    if (!Number.isSafeInteger(body.version))
      throw invalid('the rollback', [
        {
          pointer: '/version',
          message: 'version must be the version to go back to (see the history)',
        },
      ]);
    const target = ctx
      .log()
      .ruleHistory(id)
      .find((h) => h.version === body.version && h.rule !== undefined);
    if (target?.rule === undefined) throw notFound('version', `${id}@${String(body.version)}`);
    const rule = target.rule;
    const record = await commitVersioned(
      ctx,
      req,
      res,
      'the rollback',
      (rs, expected) => {
        checkRuleVersion(rs, id, expected);
        return { op: 'upsert-rule', rule };
      },
      `rollback to version ${target.version}`,
    );
    respondRule(ctx, res, id, 200, record.seq);
  });

  route(router, 'post', '/changesets', 'write', async (req, res) => {
    const body = (req.body ?? {}) as { changes?: unknown; expectedControlSeq?: unknown };
    if (!Array.isArray(body.changes) || body.changes.length === 0)
      throw invalid('the changeset', [
        { pointer: '/changes', message: 'changes must be a non-empty array of control messages' },
      ]);
    const changes = body.changes as Record<string, unknown>[];
    const role = res.locals.principal?.role as string | undefined;
    if (changes.some((c) => c?.op === 'replace-all' || c?.op === 'clear-state') && role !== 'admin')
      throw new ApiError(
        ApiErrorCode.Forbidden,
        'replace-all and clear-state need the "admin" role',
        {
          details: { needed: 'admin', role },
        },
      );
    const expectedSeq = body.expectedControlSeq;
    if (expectedSeq !== undefined && !Number.isSafeInteger(expectedSeq))
      throw new ApiError(ApiErrorCode.BadRequest, 'expectedControlSeq must be an integer');
    // Each change's expectedVersion, parsed as the PUT routes parse theirs, before anything is
    // published: a bad one is the client's mistake (400), not a conflict.
    const checks = changes.map((c, i) => versionCheck(c, i));
    const record = await ctx.writer().commit(
      (rs) => {
        if (expectedSeq !== undefined && rs.controlSeq !== expectedSeq)
          throw new ApiError(
            ApiErrorCode.Conflict,
            `CONTROL is at sequence ${rs.controlSeq}, not ${String(expectedSeq)}`,
            { details: { currentControlSeq: rs.controlSeq, expectedControlSeq: expectedSeq } },
          );
        for (const check of checks) {
          if (check === undefined) continue;
          if (check.kind === 'rule') checkRuleVersion(rs, check.id, check.expected);
          else checkModelVersion(ctx.log(), check.id, check.expected);
        }
        const stripped = changes.map((c) => {
          if (typeof c !== 'object' || c === null) return c;
          const { expectedVersion: _ev, meta: _m, ...rest } = c;
          return rest;
        });
        return {
          op: 'changeset',
          changes: stripped as unknown as ControlChange[],
        } satisfies ControlMessage;
      },
      changeMeta(req, res),
      'the changeset',
    );
    res.json({ change: changeView(record) });
  });
}
