/**
 * The OpenAPI 3.0 description of `/v1`, served at `/v1/openapi.json`. Written by hand so it can
 * say what each route means; a test checks that its paths and methods are exactly the routes the
 * router registers.
 */

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: unknown) => ({ 'application/json': { schema } });
const errors = (...codes: number[]) =>
  Object.fromEntries(
    codes.map((c) => [String(c), { $ref: `#/components/responses/E${c}` }] as const),
  );
const idParam = { name: 'id', in: 'path', required: true, schema: { type: 'string' } };
const ifMatch = {
  name: 'If-Match',
  in: 'header',
  required: false,
  description:
    'The version the change expects ("0": must not exist; *: must exist, else 412). Stale: 409.',
  schema: { type: 'string' },
};
const reason = {
  name: 'X-Vigil-Reason',
  in: 'header',
  required: false,
  description: 'Why: recorded in the control message meta (or body field `reason`).',
  schema: { type: 'string' },
};

/** A required JSON request body. */
const body = (schema: unknown) => ({ required: true, content: json(schema) });
const ok = (description: string, schema: unknown = { type: 'object' }) => ({
  description,
  content: json(schema),
});

function op(
  summary: string,
  role: 'read' | 'write' | 'admin' | 'none',
  responses: Record<string, unknown>,
  extra: Record<string, unknown> = {},
) {
  // What every route of its kind can answer, so no route forgets one: a body can have the wrong
  // media type (415); a change with If-Match can meet "*" and nothing (412), and can be stored but
  // not applied in time (504); any route behind a token answers 503 while CONTROL is being read,
  // and 500 when something breaks.
  const params = (extra.parameters ?? []) as unknown[];
  const implied = [
    ...(extra.requestBody !== undefined ? [415] : []),
    ...(params.includes(ifMatch) ? [412, 504] : []),
    ...(role === 'none' ? [] : [401, 403, 500, 503]),
  ];
  return {
    summary,
    description: role === 'none' ? 'No token needed.' : `Needs the "${role}" role (or higher).`,
    ...(role === 'none' ? { security: [] } : {}),
    ...extra,
    responses: { ...responses, ...errors(...implied) },
  };
}

/** An operation on what `{id}` names: 200 with it (`schema`), 404 when there is no such thing. */
const onId = (summary: string, role: 'read' | 'write', description: string, schema?: unknown) =>
  op(summary, role, { '200': ok(description, schema), ...errors(404) }, { parameters: [idParam] });

/** The filters of a dead-letter listing: reason, rule, since, until. */
const dlqFilterParams = [
  {
    name: 'reason',
    in: 'query',
    description: 'one dead-letter reason (not-json, late, rule-error, …)',
    schema: { type: 'string' },
  },
  {
    name: 'rule',
    in: 'query',
    description: 'letters that name this rule (rule-error)',
    schema: { type: 'string' },
  },
  {
    name: 'since',
    in: 'query',
    description:
      'a DLQ sequence (42), a time (2026-12-01T10:00:00Z) or a duration before now (15m, 1h, 2d)',
    schema: { type: 'string' },
  },
  {
    name: 'until',
    in: 'query',
    description: 'as since, inclusive',
    schema: { type: 'string' },
  },
];

const change = (schema?: unknown, params: unknown[] = [idParam, ifMatch, reason]) => ({
  parameters: params,
  ...(schema === undefined ? {} : { requestBody: body(schema) }),
});

/** The document. */
export const OPENAPI = {
  openapi: '3.0.3',
  info: {
    title: 'Vigil control plane',
    version: '1',
    description:
      'Rules, models and lookup tables over the CONTROL stream (the source of truth). Every change is one control message on vigil.control, validated first, recorded with actor, reason and request id. Versions are CONTROL sequences. Errors: {"error": {"code", "message", "details"}}.',
  },
  servers: [{ url: '/v1' }],
  security: [{ bearer: [] }],
  paths: {
    '/openapi.json': { get: op('This document', 'none', { '200': ok('OpenAPI 3.0 document') }) },
    '/rules': {
      get: op('List rules with state, version and last change', 'read', {
        '200': ok('Rules', {
          type: 'object',
          properties: {
            controlSeq: { type: 'integer' },
            rules: { type: 'array', items: ref('RuleView') },
          },
        }),
      }),
    },
    '/rules/validate': {
      post: op(
        'Validate a rule or a control message against the rules in force, publishing nothing',
        'read',
        {
          '200': ok(
            "Valid, with what it would do to each rule's state, and warnings from a sample of EVENTS (a rule keyed by a field the sampled events of its types lack)",
          ),
          ...errors(400, 422),
        },
        {
          parameters: [
            {
              name: 'sample',
              in: 'query',
              description:
                'Last records of EVENTS to check the rule against (0: none; at most 100000; read for at most 2 s)',
              schema: { type: 'integer', minimum: 0, maximum: 100000, default: 1000 },
            },
          ],
          requestBody: body({
            oneOf: [
              ref('Rule'),
              { type: 'object', properties: { rule: ref('Rule') } },
              { type: 'object', properties: { message: { type: 'object' } } },
            ],
          }),
        },
      ),
    },
    '/rules/{id}': {
      get: onId('One rule (ETag: its version)', 'read', 'Rule', ref('RuleView')),
      put: op(
        'Create or replace a rule',
        'write',
        {
          '200': ok('Replaced', ref('RuleChange')),
          '201': ok('Created', ref('RuleChange')),
          ...errors(400, 409, 413, 422),
        },
        change({
          oneOf: [
            ref('Rule'),
            {
              type: 'object',
              required: ['rule'],
              properties: {
                rule: ref('Rule'),
                expectedVersion: { type: 'integer' },
                reason: { type: 'string' },
              },
            },
          ],
        }),
      ),
      delete: op(
        'Delete a rule',
        'write',
        { '200': ok('Deleted', ref('RuleChange')), ...errors(404, 409) },
        change(),
      ),
    },
    '/rules/{id}/pause': {
      post: op(
        'Pause a rule (it keeps its definition)',
        'write',
        { '200': ok('Paused', ref('RuleChange')), ...errors(404, 409) },
        change(),
      ),
    },
    '/rules/{id}/resume': {
      post: op(
        'Resume a paused rule',
        'write',
        { '200': ok('Resumed', ref('RuleChange')), ...errors(404, 409) },
        change(),
      ),
    },
    '/rules/{id}/history': {
      get: onId(
        'Every revision of a rule: who, when, why, and a diff to the revision before',
        'read',
        'History',
      ),
    },
    '/rules/{id}/diff': {
      get: op(
        'Differences between two versions (default: the one before the current, and the current)',
        'read',
        { '200': ok('Diff'), ...errors(400, 404) },
        {
          parameters: [
            idParam,
            { name: 'from', in: 'query', schema: { type: 'integer' } },
            { name: 'to', in: 'query', schema: { type: 'integer' } },
          ],
        },
      ),
    },
    '/rules/{id}/rollback': {
      post: op(
        'Publish the definition of an earlier version as the new version',
        'write',
        { '200': ok('Rolled back', ref('RuleChange')), ...errors(404, 409, 422) },
        change({
          type: 'object',
          required: ['version'],
          properties: {
            version: { type: 'integer' },
            expectedVersion: { type: 'integer' },
            reason: { type: 'string' },
          },
        }),
      ),
    },
    '/rules/{id}/explain': {
      post: op(
        "How the rule in force judges one event: each check, and the condition tree with every leaf's fact value and result (json-rules-engine's result tree)",
        'read',
        { '200': ok('Explanation'), ...errors(404, 422) },
        {
          parameters: [idParam],
          requestBody: body({
            type: 'object',
            required: ['event'],
            properties: {
              event: { type: 'object' },
              key: { type: 'string', description: 'partition key, for rules without "key"' },
            },
          }),
        },
      ),
    },
    '/rules/{id}/stats': {
      get: onId(
        'Matches, alerts, errors, quarantines, overflows and events without its key field (keyMissing) of this process, and the last alert in ALERTS',
        'read',
        'Stats',
      ),
    },
    '/changesets': {
      post: op(
        'Several changes as one atomic control message (replace-all and clear-state need "admin")',
        'write',
        { '200': ok('Applied'), ...errors(400, 409, 412, 413, 422, 504) },
        {
          parameters: [reason],
          requestBody: body({
            type: 'object',
            required: ['changes'],
            properties: {
              changes: {
                type: 'array',
                items: {
                  type: 'object',
                  description:
                    'a control message (not a changeset). A rule or model change may carry expectedVersion (the version of the rule or model it names; parsed as If-Match: an integer, a string of digits or "*"); on other ops it is refused with 400',
                },
              },
              expectedControlSeq: { type: 'integer' },
              reason: { type: 'string' },
            },
          }),
        },
      ),
    },
    '/models': {
      get: op('List models and lookup tables', 'read', { '200': ok('Models') }),
    },
    '/models/{id}': {
      get: onId('One model or lookup table', 'read', 'Model'),
      put: op(
        'Create or replace a model or lookup table (body up to limits.maxControlBytes, 8 MiB by default)',
        'write',
        {
          '200': ok('Replaced'),
          '201': ok('Created'),
          ...errors(400, 409, 413, 422),
        },
        change({
          type: 'object',
          description:
            'a model (logistic, linear, lookup) or {"model", "expectedVersion"?, "reason"?}',
        }),
      ),
      delete: op(
        'Delete a model',
        'write',
        { '200': ok('Deleted'), ...errors(404, 409, 422) },
        change(),
      ),
    },
    '/backtest': {
      post: op(
        'Replay a range of EVENTS in-process through the rules in force at each event, and through a candidate rule set; nothing is published. 202 with a job id, or 200 with the result when "wait" is true. One at a time. With "wait": a run that failed answers 500 VIGIL_E_INTERNAL, one cancelled (DELETE, or the client hung up) 409 VIGIL_E_BACKTEST_CANCELLED, each in the error shape with the job in details.job.',
        'write',
        { '200': ok('Finished (wait: true)'), '202': ok('Started'), ...errors(409, 422) },
        {
          requestBody: body({
            type: 'object',
            properties: {
              from: {
                type: 'object',
                description: '{"seq": n} or {"time": ISO-8601}; default the first record',
              },
              to: {
                type: 'object',
                description: '{"seq": n} or {"time": ISO-8601}; default the head',
              },
              candidate: {
                type: 'object',
                description:
                  '{"rules", "models"?} (a whole rule set) or {"changes"} (applied to the rules in force)',
              },
              wait: { type: 'boolean' },
              maxAlerts: {
                type: 'integer',
                description: 'alerts listed per side (all are counted); default 1000',
              },
            },
          }),
        },
      ),
    },
    '/backtest/{id}': {
      get: onId('Progress, then the result, of a back-test', 'read', 'Job'),
      delete: onId('Cancel a back-test', 'write', 'Job'),
    },
    '/models/{id}/history': {
      get: onId('Every change of a model: sequence, time, who, why', 'read', 'History'),
    },
    '/status': {
      get: op(
        'Per partition: owner, applied control sequence, lag, watermark, last checkpoint; whether all run the latest version; activation latency',
        'read',
        { '200': ok('Status') },
      ),
    },
    '/control': {
      get: op(
        'The audit log: CONTROL messages after a sequence',
        'read',
        { '200': ok('Changes'), ...errors(400) },
        {
          parameters: [
            { name: 'after', in: 'query', schema: { type: 'integer' } },
            { name: 'limit', in: 'query', schema: { type: 'integer', maximum: 1000 } },
          ],
        },
      ),
    },
    '/dlq': {
      get: op(
        "Dead letters in DLQ, oldest first: the latest `limit`, or with `after`/`since` the first `limit` from there. Follow by long poll: pass the answer's `cursor` as `after` with `wait`, and the answer comes when a letter does (or `wait` ms pass, with none).",
        'read',
        {
          '200': ok('Dead letters', {
            type: 'object',
            properties: {
              letters: { type: 'array', items: ref('DeadLetter') },
              cursor: {
                type: 'integer',
                description:
                  'the last DLQ sequence this answer covers: pass as `after` for what comes next',
              },
              more: {
                type: 'boolean',
                description:
                  'with after/since: letters after the cursor were left for the next page; else: older letters may be there',
              },
              firstSeq: { type: 'integer' },
              lastSeq: { type: 'integer' },
            },
          }),
          ...errors(400),
        },
        {
          parameters: [
            ...dlqFilterParams,
            {
              name: 'after',
              in: 'query',
              description: 'letters after this DLQ sequence (a cursor)',
              schema: { type: 'integer', minimum: 0 },
            },
            {
              name: 'limit',
              in: 'query',
              description: 'default 100; 0 answers only the cursor',
              schema: { type: 'integer', minimum: 0, maximum: 1000 },
            },
            {
              name: 'payload',
              in: 'query',
              description:
                'the whole payload too: text (base64 when it is not UTF-8) or base64; up to 16 MiB of payloads an answer, later letters get payloadOmitted',
              schema: { type: 'string', enum: ['text', 'base64'] },
            },
            {
              name: 'wait',
              in: 'query',
              description: 'with after: wait up to this many ms for a letter (long poll)',
              schema: { type: 'integer', minimum: 0, maximum: 30000 },
            },
          ],
        },
      ),
    },
    '/dlq/stats': {
      get: op(
        'Dead letters per reason, and the total, since a time or sequence (default: all DLQ holds)',
        'read',
        {
          '200': ok('Counts', {
            type: 'object',
            properties: {
              since: {},
              until: { type: 'string', format: 'date-time' },
              fromSeq: { type: 'integer' },
              toSeq: { type: 'integer' },
              total: { type: 'integer' },
              reasons: { type: 'object', additionalProperties: { type: 'integer' } },
            },
          }),
          ...errors(400),
        },
        { parameters: [dlqFilterParams[2]] },
      ),
    },
    '/dlq/replay': {
      post: op(
        "Publish dead letters again to their source subject (EVENTS), the original payload without Vigil's headers, with Nats-Msg-Id vigil-dlq-replay-<DLQ seq>: a letter replayed again within the EVENTS duplicate window is a duplicate, and nothing is stored. Rejected control messages are not replayed. Recorded in the service log.",
        'write',
        { '200': ok('What went back', ref('ReplayReport')), ...errors(400) },
        {
          requestBody: body({
            type: 'object',
            description: 'seqs, or a filter with at least reason or rule (oldest first)',
            properties: {
              seqs: { type: 'array', items: { type: 'integer' }, maxItems: 1000 },
              reason: { type: 'string' },
              rule: { type: 'string' },
              since: { oneOf: [{ type: 'integer' }, { type: 'string' }] },
              until: { oneOf: [{ type: 'integer' }, { type: 'string' }] },
              after: {
                type: 'integer',
                minimum: 0,
                description: 'go on after this DLQ sequence (the cursor of a replay that had more)',
              },
              limit: { type: 'integer', minimum: 1, maximum: 10000, default: 1000 },
              dryRun: { type: 'boolean' },
            },
          }),
        },
      ),
    },
  },
  components: {
    securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
    schemas: {
      Rule: {
        type: 'object',
        description: 'A rule (docs/rule-language.md)',
        required: ['on'],
        properties: {
          id: { type: 'string' },
          on: { type: 'array', items: { type: 'string' } },
          key: {
            description: "field, or list of fields (a composite key), keying the rule's state",
            oneOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' }, minItems: 1 }],
          },
          when: { type: 'object' },
          pattern: { type: 'object' },
          alert: { type: 'object' },
          description: { type: 'string' },
        },
      },
      RuleView: {
        type: 'object',
        properties: {
          id: { type: 'string' },
          state: { type: 'string', enum: ['active', 'paused'] },
          version: { type: 'integer' },
          stateEpoch: { type: 'integer' },
          lastChange: { type: 'object' },
          rule: ref('Rule'),
        },
      },
      RuleChange: {
        allOf: [ref('RuleView'), { type: 'object', properties: { change: { type: 'object' } } }],
      },
      DeadLetter: {
        type: 'object',
        properties: {
          seq: { type: 'integer', description: 'DLQ sequence' },
          time: { type: 'string', format: 'date-time', description: 'when DLQ stored it' },
          reason: { type: 'string' },
          error: { type: 'string' },
          source: {
            type: 'object',
            nullable: true,
            properties: {
              stream: { type: 'string' },
              subject: { type: 'string' },
              seq: { type: 'integer' },
            },
          },
          rule: { type: 'string' },
          id: { type: 'string', description: "the dead letter's Nats-Msg-Id" },
          size: { type: 'integer', description: 'payload bytes' },
          preview: {
            type: 'string',
            description: 'the payload on one line, cut at 120 characters',
          },
          payload: { type: 'string' },
          encoding: { type: 'string', enum: ['text', 'base64'] },
          payloadOmitted: { type: 'boolean' },
        },
      },
      ReplayReport: {
        type: 'object',
        properties: {
          dryRun: { type: 'boolean' },
          selected: { type: 'integer' },
          replayed: { type: 'integer' },
          duplicates: { type: 'integer', description: 'already replayed: nothing stored' },
          failed: { type: 'integer' },
          wouldReplay: { type: 'integer', description: 'dry run: would go back' },
          more: { type: 'boolean', description: 'the selection stopped at limit' },
          cursor: {
            type: 'integer',
            description:
              'the last DLQ sequence a filter covered; with more, pass it as after (0 for seqs)',
          },
          results: {
            type: 'array',
            items: {
              type: 'object',
              properties: {
                seq: { type: 'integer' },
                outcome: {
                  type: 'string',
                  enum: ['replayed', 'duplicate', 'failed', 'would-replay'],
                },
                reason: { type: 'string' },
                subject: { type: 'string' },
                eventsSeq: { type: 'integer' },
                error: { type: 'string' },
              },
            },
          },
        },
      },
      Error: {
        type: 'object',
        required: ['error'],
        properties: {
          error: {
            type: 'object',
            required: ['code', 'message'],
            properties: {
              code: { type: 'string' },
              message: { type: 'string' },
              details: { type: 'object' },
            },
          },
        },
      },
    },
    responses: Object.fromEntries(
      [
        [400, 'Bad request'],
        [401, 'No or bad token'],
        [403, "The token's role does not allow this"],
        [404, 'No such rule, model, version or route'],
        [409, 'Stale expected version (details.currentVersion); back-test busy or cancelled'],
        [412, 'If-Match: * (must exist), and it does not'],
        [413, 'Body or control message too large'],
        [415, 'The body is not JSON, or not in a supported charset (UTF-8)'],
        [422, 'Not valid: details.problems, each {pointer, message}'],
        [500, 'Internal error (details.requestId), or a back-test that failed (details.job)'],
        [503, 'Still reading CONTROL at start-up, or NATS unreachable; retry'],
        [504, 'Stored in CONTROL but not applied within applyTimeoutMs; retry'],
      ].map(([code, description]) => [`E${code}`, { description, content: json(ref('Error')) }]),
    ),
  },
} as const;
