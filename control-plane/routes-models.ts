import type { Request, Router } from 'express';
import type { CompiledModel, Model } from '../rules/index.js';
import { changeStamp, changeView, commitVersioned, mustExist, revisionsOf } from './context.js';
import type { ApiContext } from './context.js';
import type { ControlLog } from './control-log.js';
import { ApiError, ApiErrorCode, notFound } from './errors.js';
import { entityFromBody, route, type ExpectedVersion } from './http-support.js';

/** A model's version: the sequence of the last change that created or replaced it. */
function modelVersion(log: ControlLog, id: string): number {
  return log.modelHistory(id).at(-1)?.seq ?? 0;
}

function size(m: CompiledModel): number {
  return m.kind === 'set' ? m.values.length : m.kind === 'map' ? m.map.size : m.def.features.length;
}

function modelView(log: ControlLog, id: string, m: CompiledModel, withDef: boolean) {
  const last = log.modelHistory(id).at(-1);
  return {
    id,
    kind: m.def.kind,
    ...(m.def.description === undefined ? {} : { description: m.def.description }),
    /** Entries of a lookup table, features of a scorer. */
    size: size(m),
    version: modelVersion(log, id),
    lastChange:
      last === undefined
        ? undefined
        : { seq: last.seq, at: new Date(last.at).toISOString(), op: last.op, ...last.meta },
    ...(withDef ? { model: m.def } : {}),
  };
}

/** 409 when a model's version is not the one the change expects (0: must not exist; `*`: must). */
export function checkModelVersion(
  log: ControlLog,
  id: string,
  expected: ExpectedVersion | undefined,
): void {
  if (expected === undefined) return;
  if (expected === '*') return mustExist('model', id, log.ruleSet.models.has(id));
  const current = log.ruleSet.models.has(id) ? modelVersion(log, id) : 0;
  if (current !== expected)
    throw new ApiError(
      ApiErrorCode.Conflict,
      `model "${id}" is at version ${current}, not ${expected}: it changed since you read it`,
      { details: { id, currentVersion: current, expectedVersion: expected } },
    );
}

function modelFromBody(req: Request, id: string): Model {
  return entityFromBody(req, 'model', id) as unknown as Model;
}

/**
 * Models and lookup tables (`list:<id>`): list, get, put, delete. A table travels in one control
 * message, so its size is bounded by `limits.maxControlBytes` (8 MiB by default) and
 * `limits.maxLookupEntries`.
 */
export function mountModelRoutes(router: Router, ctx: ApiContext): void {
  route(router, 'get', '/models', 'read', (_req, res) => {
    const log = ctx.log();
    const models = [...log.ruleSet.models]
      .sort((a, b) => (a[0] < b[0] ? -1 : 1))
      .map(([id, m]) => modelView(log, id, m, false));
    res.json({ controlSeq: log.seq, models });
  });

  route(router, 'get', '/models/:id', 'read', (req, res) => {
    const id = req.params.id as string;
    const m = ctx.log().ruleSet.models.get(id);
    if (m === undefined) throw notFound('model', id);
    res.set('ETag', `"${modelVersion(ctx.log(), id)}"`).json(modelView(ctx.log(), id, m, true));
  });

  route(router, 'get', '/models/:id/history', 'read', (req, res) => {
    const id = req.params.id as string;
    const history = revisionsOf('model', id, ctx.log().modelHistory(id));
    res.json({
      id,
      revisions: history.map((h) => ({
        ...changeStamp(h),
        action: h.deleted ? 'deleted' : 'put',
        ...h.meta,
      })),
    });
  });

  route(router, 'put', '/models/:id', 'write', async (req, res) => {
    const id = req.params.id as string;
    const model = modelFromBody(req, id);
    let existed = false;
    const record = await commitVersioned(ctx, req, res, 'the model', (rs, expected) => {
      existed = rs.models.has(id);
      checkModelVersion(ctx.log(), id, expected);
      return { op: 'upsert-model', model };
    });
    const m = ctx.log().ruleSet.models.get(id);
    if (m === undefined) throw notFound('model', id);
    res
      .status(existed ? 200 : 201)
      .set('ETag', `"${record.seq}"`)
      .json({ ...modelView(ctx.log(), id, m, false), change: changeView(record) });
  });

  route(router, 'delete', '/models/:id', 'write', async (req, res) => {
    const id = req.params.id as string;
    if (!ctx.log().ruleSet.models.has(id)) throw notFound('model', id);
    const what = `the deletion of model "${id}"`;
    const record = await commitVersioned(ctx, req, res, what, (rs, expected) => {
      if (!rs.models.has(id)) throw notFound('model', id);
      checkModelVersion(ctx.log(), id, expected);
      return { op: 'delete-model', id };
    });
    res.json({ id, deleted: true, change: changeView(record) });
  });
}
