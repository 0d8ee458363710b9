/**
 * Every stable error code of Vigil in one catalogue, with whether retrying can help and what to
 * do. It sits with `VigilError` in the lowest layer so that every layer names its codes from this
 * one list; docs/operations.md ("Error codes") shows the same table, and a unit test keeps the two
 * and the sources in step.
 */
export const ErrorCode = {
  // The rules core: rules, models, control messages, events, snapshots.
  Validation: 'VIGIL_E_VALIDATION',
  RuleEvaluation: 'VIGIL_E_RULE_EVALUATION',
  Snapshot: 'VIGIL_E_SNAPSHOT',
  // The service: configuration, servers, streams, checkpoints, leases.
  Config: 'VIGIL_E_CONFIG',
  ServersMissing: 'VIGIL_E_SERVERS_MISSING',
  ServerStart: 'VIGIL_E_SERVER_START',
  MappingMissing: 'VIGIL_E_MAPPING_MISSING',
  StreamConfig: 'VIGIL_E_STREAM_CONFIG',
  Nats: 'VIGIL_E_NATS',
  Redis: 'VIGIL_E_REDIS',
  CheckpointFenced: 'VIGIL_E_CHECKPOINT_FENCED',
  LeaseReplaced: 'VIGIL_E_LEASE_REPLACED',
  // The REST API (each with its HTTP status) and the CLI.
  BadRequest: 'VIGIL_E_BAD_REQUEST',
  Unauthorized: 'VIGIL_E_UNAUTHORIZED',
  Forbidden: 'VIGIL_E_FORBIDDEN',
  NotFound: 'VIGIL_E_NOT_FOUND',
  Conflict: 'VIGIL_E_CONFLICT',
  BacktestCancelled: 'VIGIL_E_BACKTEST_CANCELLED',
  PreconditionFailed: 'VIGIL_E_PRECONDITION_FAILED',
  TooLarge: 'VIGIL_E_TOO_LARGE',
  UnsupportedMedia: 'VIGIL_E_UNSUPPORTED_MEDIA',
  Unavailable: 'VIGIL_E_UNAVAILABLE',
  Timeout: 'VIGIL_E_TIMEOUT',
  Internal: 'VIGIL_E_INTERNAL',
  Usage: 'VIGIL_E_USAGE',
  Interrupted: 'VIGIL_E_INTERRUPTED',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/**
 * The codes named, as a const object like `ErrorCode`: one layer's share of the catalogue, so each
 * layer's error class takes only its own codes.
 */
export function codesOf<const N extends keyof typeof ErrorCode>(
  ...names: N[]
): { readonly [K in N]: (typeof ErrorCode)[K] } {
  const out = {} as { [K in N]: (typeof ErrorCode)[K] };
  for (const n of names) out[n] = ErrorCode[n];
  return out;
}

/** What one code means for whoever meets it. */
export interface ErrorCodeInfo {
  /** Where it is raised. */
  readonly layer: 'rules' | 'service' | 'api' | 'cli';
  /**
   * Whether trying the same thing again later can help; `depends` when errors of this code differ
   * (each error's own `retryable` says).
   */
  readonly retryable: boolean | 'depends';
  /** What went wrong and what to do about it, in one sentence. */
  readonly meaning: string;
}

/** The catalogue: every code, its layer, whether retrying helps, and what to do. */
export const ERROR_CODES: Readonly<Record<ErrorCode, ErrorCodeInfo>> = {
  VIGIL_E_VALIDATION: {
    layer: 'rules',
    retryable: false,
    meaning:
      'A rule, model, control message or setting is not valid; `problems` lists each with a JSON pointer and how to fix it.',
  },
  VIGIL_E_RULE_EVALUATION: {
    layer: 'rules',
    retryable: false,
    meaning:
      'A rule threw while judging an event (e.g. a custom path on a value of the wrong type); the event is dead-lettered and the rule is paused after repeated errors.',
  },
  VIGIL_E_SNAPSHOT: {
    layer: 'rules',
    retryable: false,
    meaning:
      'A checkpoint could not be restored (corrupt or unknown format, or its rule set is missing); the partition does not start.',
  },
  VIGIL_E_CONFIG: {
    layer: 'service',
    retryable: false,
    meaning:
      'A setting cannot be used (e.g. a Redis URL that is not redis:// or rediss://); the message names it. Settings checked at start-up fail with VIGIL_E_VALIDATION, one problem per setting.',
  },
  VIGIL_E_SERVERS_MISSING: {
    layer: 'service',
    retryable: false,
    meaning:
      'nats-server or redis-server is not installed and could not be installed; install them (apt-get install nats-server redis-server) or set NATS_URL/REDIS_URL.',
  },
  VIGIL_E_SERVER_START: {
    layer: 'service',
    retryable: 'depends',
    meaning:
      'A local nats-server or redis-server (npm start, tests) exited before it was ready; its log is in the message. One that was only slow to start is retryable.',
  },
  VIGIL_E_MAPPING_MISSING: {
    layer: 'service',
    retryable: false,
    meaning:
      'The NATS server does not map events.<key> to events.<key>.<partition> for this partition count; load the shipped nats.conf or fix VIGIL_PARTITIONS.',
  },
  VIGIL_E_STREAM_CONFIG: {
    layer: 'service',
    retryable: false,
    meaning:
      'A stream exists with settings Vigil cannot use (e.g. another partition count); the message says which and how to move it.',
  },
  VIGIL_E_NATS: {
    layer: 'service',
    retryable: 'depends',
    meaning:
      'NATS was unreachable or refused a request: a lost connection is retried; a refused pull or a reply Vigil cannot read is not, and the message says which server limit or version to check.',
  },
  VIGIL_E_REDIS: {
    layer: 'service',
    retryable: 'depends',
    meaning:
      'Redis was unreachable or refused a request: a lost connection or a busy server is retried; a certificate it does not trust or a wrong reply is not.',
  },
  VIGIL_E_CHECKPOINT_FENCED: {
    layer: 'service',
    retryable: false,
    meaning:
      'A checkpoint write was refused because another process now owns the partition; this process stops it (expected during a rebalance).',
  },
  VIGIL_E_LEASE_REPLACED: {
    layer: 'service',
    retryable: false,
    meaning:
      'A newer process registered this instance id; this one holds no partition any more. Give each process its own VIGIL_INSTANCE_ID.',
  },
  VIGIL_E_BAD_REQUEST: {
    layer: 'api',
    retryable: false,
    meaning: 'HTTP 400: the body is not JSON, or a query, header or path is malformed.',
  },
  VIGIL_E_UNAUTHORIZED: {
    layer: 'api',
    retryable: false,
    meaning: 'HTTP 401: no bearer token, or not a valid one (CLI exit code 3).',
  },
  VIGIL_E_FORBIDDEN: {
    layer: 'api',
    retryable: false,
    meaning: "HTTP 403: the token's role does not allow this (CLI exit code 3).",
  },
  VIGIL_E_NOT_FOUND: {
    layer: 'api',
    retryable: false,
    meaning: 'HTTP 404: no such rule, model, version, back-test or route (CLI exit code 4).',
  },
  VIGIL_E_CONFLICT: {
    layer: 'api',
    retryable: false,
    meaning:
      'HTTP 409: the version changed since it was read, or a back-test is running; read again and retry the change (CLI exit code 5).',
  },
  VIGIL_E_BACKTEST_CANCELLED: {
    layer: 'api',
    retryable: false,
    meaning: 'HTTP 409: a back-test that was waited for was cancelled.',
  },
  VIGIL_E_PRECONDITION_FAILED: {
    layer: 'api',
    retryable: false,
    meaning: 'HTTP 412: `If-Match: *` asked for something to exist, and it does not.',
  },
  VIGIL_E_TOO_LARGE: {
    layer: 'api',
    retryable: false,
    meaning:
      "HTTP 413: the body is over the limit, or over the NATS server's max_payload (`details.limit`).",
  },
  VIGIL_E_UNSUPPORTED_MEDIA: {
    layer: 'api',
    retryable: false,
    meaning: 'HTTP 415: the body is not application/json.',
  },
  VIGIL_E_UNAVAILABLE: {
    layer: 'api',
    retryable: true,
    meaning:
      'HTTP 503: still reading CONTROL at start-up, or NATS is unreachable; retry (CLI exit code 6).',
  },
  VIGIL_E_TIMEOUT: {
    layer: 'api',
    retryable: true,
    meaning: 'HTTP 504: a change was stored in CONTROL but not applied in time; retry the read.',
  },
  VIGIL_E_INTERNAL: {
    layer: 'api',
    retryable: false,
    meaning: 'HTTP 500: a fault of the service; `details.requestId` finds it in the log.',
  },
  VIGIL_E_USAGE: {
    layer: 'cli',
    retryable: false,
    meaning: 'A bad command line or input file (CLI exit code 2); the message says what to change.',
  },
  VIGIL_E_INTERRUPTED: {
    layer: 'cli',
    retryable: true,
    meaning: 'The command was interrupted (Ctrl-C; CLI exit code 130).',
  },
};
