import { codesOf, VigilError, type VigilErrorOptions } from '../rules/index.js';

/** Stable error codes of the service (from the one catalogue, `ERROR_CODES` in rules/). */
export const ServiceErrorCode = codesOf(
  'Config',
  'ServersMissing',
  'ServerStart',
  'MappingMissing',
  'StreamConfig',
  'Nats',
  'Redis',
  'CheckpointFenced',
  'LeaseReplaced',
);
export type ServiceErrorCode = (typeof ServiceErrorCode)[keyof typeof ServiceErrorCode];

/** An error of the service layer; `retryable` says whether trying again later can help. */
export class ServiceError extends VigilError {
  override name = 'ServiceError';
  constructor(code: ServiceErrorCode, message: string, options: VigilErrorOptions = {}) {
    super(code, message, options);
  }
}
