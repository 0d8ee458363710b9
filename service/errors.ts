import { ERROR_CODES, ErrorCode, VigilError } from '../rules/index.js';

/** Stable error codes of the service (from the one catalogue, `ERROR_CODES` in rules/). */
export const ServiceErrorCode = {
  Config: ErrorCode.Config,
  ServersMissing: ErrorCode.ServersMissing,
  ServerStart: ErrorCode.ServerStart,
  MappingMissing: ErrorCode.MappingMissing,
  StreamConfig: ErrorCode.StreamConfig,
  Nats: ErrorCode.Nats,
  Redis: ErrorCode.Redis,
  CheckpointFenced: ErrorCode.CheckpointFenced,
  LeaseReplaced: ErrorCode.LeaseReplaced,
} as const;
export type ServiceErrorCode = (typeof ServiceErrorCode)[keyof typeof ServiceErrorCode];

/** An error of the service layer; `retryable` says whether trying again later can help. */
export class ServiceError extends VigilError {
  override name = 'ServiceError';
  constructor(
    code: ServiceErrorCode,
    message: string,
    options: { retryable?: boolean; cause?: unknown } = {},
  ) {
    super(code, message, {
      retryable: options.retryable ?? ERROR_CODES[code].retryable === true,
      cause: options.cause,
    });
  }
}
