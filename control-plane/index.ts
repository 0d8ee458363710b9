/** Vigil's control plane: the REST API (and the `vigil` CLI's client) over the control topic. */
export { createControlPlane, type ControlPlane } from './api.js';
export { type ServiceSettings } from './options.js';
export { allows, TokenAuth, type Principal } from './auth.js';
export {
  ControlLog,
  type ChangeRecord,
  type ModelRevision,
  type RuleRevision,
} from './control-log.js';
export { ControlWriter } from './control-writer.js';
export {
  deadLetterOf,
  letterView,
  parseBound,
  parseListQuery,
  preview,
  replayMsgId,
  replayTarget,
  type DeadLetter,
  type LetterView,
} from './dlq-letter.js';
export { DlqReader } from './dlq-reader.js';
export { replayReport, type ReplayOutcome, type ReplayReport } from './dlq-replay.js';
export { API_ERROR_STATUS, ApiError, ApiErrorCode } from './errors.js';
export { SECURITY_HEADERS } from './http-support.js';
export { jsonDiff, type JsonChange } from './json-diff.js';
export { OPENAPI } from './openapi.js';
export {
  API_ENV,
  MIN_TOKEN_LENGTH,
  resolveControlPlaneOptions,
  ROLES,
  type ApiToken,
  type ControlPlaneOptions,
  type Role,
} from './options.js';
