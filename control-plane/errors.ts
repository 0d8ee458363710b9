import { codesOf, VigilError, type Problem, type VigilErrorOptions } from '../rules/index.js';

/**
 * Stable error codes of the control plane (from the one catalogue, `ERROR_CODES` in rules/), each
 * with the HTTP status it answers with.
 */
export const ApiErrorCode = codesOf(
  'BadRequest',
  'Unauthorized',
  'Forbidden',
  'NotFound',
  'Conflict',
  'BacktestCancelled',
  'PreconditionFailed',
  'TooLarge',
  'UnsupportedMedia',
  'Validation',
  'Unavailable',
  'Timeout',
  'Internal',
);
export type ApiErrorCode = (typeof ApiErrorCode)[keyof typeof ApiErrorCode];

/** The HTTP status of each code. */
export const API_ERROR_STATUS: Readonly<Record<ApiErrorCode, number>> = {
  VIGIL_E_BAD_REQUEST: 400,
  VIGIL_E_UNAUTHORIZED: 401,
  VIGIL_E_FORBIDDEN: 403,
  VIGIL_E_NOT_FOUND: 404,
  VIGIL_E_CONFLICT: 409,
  VIGIL_E_BACKTEST_CANCELLED: 409,
  VIGIL_E_PRECONDITION_FAILED: 412,
  VIGIL_E_TOO_LARGE: 413,
  VIGIL_E_UNSUPPORTED_MEDIA: 415,
  VIGIL_E_VALIDATION: 422,
  VIGIL_E_UNAVAILABLE: 503,
  VIGIL_E_TIMEOUT: 504,
  VIGIL_E_INTERNAL: 500,
};

/**
 * An error the API answers with: `{error: {code, message, details}}` and the code's status.
 * `details` is JSON for the client (problems, current version, …), never a stack trace.
 */
export class ApiError extends VigilError {
  override name = 'ApiError';
  readonly status: number;
  readonly details: Readonly<Record<string, unknown>> | undefined;

  constructor(
    code: ApiErrorCode,
    message: string,
    options: VigilErrorOptions & { details?: Readonly<Record<string, unknown>> } = {},
  ) {
    super(code, message, options);
    this.status = API_ERROR_STATUS[code];
    this.details = options.details;
  }

  /** The JSON body of this error. */
  toBody(): {
    error: { code: string; message: string; details?: Readonly<Record<string, unknown>> };
  } {
    return {
      error: {
        code: this.code,
        message: this.message,
        ...(this.details === undefined ? {} : { details: this.details }),
      },
    };
  }
}

/** 422 with every problem the rules core found (JSON pointer + how to fix it). */
export function invalid(what: string, problems: readonly Problem[]): ApiError {
  const first = problems[0];
  const summary =
    first === undefined
      ? ''
      : `: ${first.pointer || '/'}: ${first.message}${problems.length > 1 ? ` (and ${problems.length - 1} more)` : ''}`;
  return new ApiError(ApiErrorCode.Validation, `${what} is not valid${summary}`, {
    details: { problems },
  });
}

/** 404 for a rule or model that does not exist. */
export function notFound(
  kind: 'rule' | 'model' | 'version' | 'route' | 'backtest',
  id: string,
): ApiError {
  return new ApiError(ApiErrorCode.NotFound, `there is no ${kind} "${id}"`, {
    details: { [kind]: id },
  });
}
