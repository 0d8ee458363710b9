import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { Request, Response } from 'express';
import type { ControlMessage, RuleSet } from '../rules/index.js';
import type { ServiceStatus } from '../service/status.js';
import type { ChangeRecord, ControlLog } from './control-log.js';
import type { ControlWriter } from './control-writer.js';
import { ApiError, ApiErrorCode, notFound } from './errors.js';
import { changeMeta, expectedVersion, type ExpectedVersion } from './http-support.js';
import type { ControlPlaneOptions } from './options.js';

/** What the route handlers share: settings, the fold of `CONTROL`, the writer, the service's pool. */
export interface ApiContext {
  readonly options: ControlPlaneOptions;
  /** The fold of `CONTROL`; 503 until the control plane has caught up with it. */
  log(): ControlLog;
  writer(): ControlWriter;
  js(): JetStreamClient;
  jsm(): JetStreamManager;
  /** The service's worker pool, when the API runs inside the service (status, stats). */
  pool(): ServiceStatus | undefined;
}

/** 503 while the control plane is starting. */
export function starting(): ApiError {
  return new ApiError(
    ApiErrorCode.Unavailable,
    'the control plane is still reading CONTROL; try again in a moment',
  );
}

/** Which control message made a change, and when: how every change the API shows begins. */
export function changeStamp(r: {
  readonly seq: number;
  readonly at: number;
  readonly op: string;
}): {
  seq: number;
  at: string;
  op: string;
} {
  return { seq: r.seq, at: new Date(r.at).toISOString(), op: r.op };
}

/** A rule's or a model's revisions; 404 naming it when it never existed. */
export function revisionsOf<R>(
  kind: 'rule' | 'model',
  id: string,
  history: readonly R[],
): readonly R[] {
  if (history.length === 0) throw notFound(kind, id);
  return history;
}

/** A change's audit record as the API shows it. */
export function changeView(r: ChangeRecord): Record<string, unknown> {
  return {
    ...changeStamp(r),
    ok: r.ok,
    ...r.meta,
    changes: r.changes,
    ...(r.models.length > 0 ? { models: r.models } : {}),
    ...(r.problems === undefined ? {} : { problems: r.problems }),
  };
}

/**
 * 412 when `*` ("must exist", HTTP's `If-Match: *`) meets a thing that does not exist; the kind
 * and id name it.
 */
export function mustExist(kind: 'rule' | 'model', id: string, exists: boolean): void {
  if (!exists)
    throw new ApiError(
      ApiErrorCode.PreconditionFailed,
      `${kind} "${id}" does not exist, but the change expects it to (If-Match: *)`,
      { details: { id, currentVersion: 0, expectedVersion: '*' } },
    );
}

/** 409 when a rule's version is not the one the change expects (0: the rule must not exist). */
export function checkRuleVersion(
  rs: RuleSet,
  id: string,
  expected: ExpectedVersion | undefined,
): void {
  if (expected === undefined) return;
  if (expected === '*') return mustExist('rule', id, rs.rules.has(id));
  const current = rs.rules.get(id)?.version ?? 0;
  if (current !== expected)
    throw new ApiError(
      ApiErrorCode.Conflict,
      current === 0
        ? `rule "${id}" does not exist, but the change expects version ${expected}`
        : `rule "${id}" is at version ${current}, not ${expected}: it changed since you read it; get it again and reapply your change`,
      { details: { id, currentVersion: current, expectedVersion: expected } },
    );
}

/**
 * Writes one change of the rule or model a request names, under the request's `If-Match`: `build`
 * gets the fold the change will land on and the version the request expects, checks the one
 * against the other and returns the message. `reason` stands in when the request gives none.
 */
export function commitVersioned(
  ctx: ApiContext,
  req: Request,
  res: Response,
  what: string,
  build: (rs: RuleSet, expected: ExpectedVersion | undefined) => ControlMessage,
  reason?: string,
): Promise<ChangeRecord> {
  // In this order, as the routes did before: a bad If-Match (400) before a starting API (503).
  const expected = expectedVersion(req);
  const writer = ctx.writer();
  const meta = changeMeta(req, res);
  return writer.commit(
    (rs) => build(rs, expected),
    meta.reason === undefined && reason !== undefined ? { ...meta, reason } : meta,
    what,
  );
}
