import { VigilError } from '../rules/index.js';

/** Stable error codes of the service. */
export const ServiceErrorCode = {
  Config: 'VIGIL_E_CONFIG',
  ServersMissing: 'VIGIL_E_SERVERS_MISSING',
  ServerStart: 'VIGIL_E_SERVER_START',
  MappingMissing: 'VIGIL_E_MAPPING_MISSING',
  StreamConfig: 'VIGIL_E_STREAM_CONFIG',
  Nats: 'VIGIL_E_NATS',
  Worker: 'VIGIL_E_WORKER',
  Redis: 'VIGIL_E_REDIS',
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
    super(code, message, options);
  }
}
