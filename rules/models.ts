import { pointer, type Problem } from './errors.js';
import { FORBIDDEN_NAMES } from './json-path.js';
import type { RuleLimits } from './limits.js';
import type { Feature, LookupModel, Model, ScorerModel } from './types.js';
import { isObject, nonEmptyArrayAt, objectAt } from './validate-json.js';

/** A model ready to be used from conditions: scorers as `model:<id>`, lookups as `list:<id>`. */
export type CompiledModel =
  | {
      readonly kind: 'scorer';
      readonly def: ScorerModel;
      readonly score: (event: Readonly<Record<string, unknown>>) => number;
    }
  | {
      readonly kind: 'set';
      readonly def: LookupModel;
      readonly set: ReadonlySet<unknown>;
      readonly values: readonly unknown[];
    }
  | {
      readonly kind: 'map';
      readonly def: LookupModel;
      readonly map: ReadonlyMap<string, unknown>;
      readonly entries: Readonly<Record<string, unknown>>;
    };

export type ModelRegistry = ReadonlyMap<string, CompiledModel>;

const ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

/** True when `id` is a valid rule or model id: 1-128 of letters, digits, `_`, `-` (it becomes a NATS subject token, so no dots). */
export function isValidId(id: unknown): id is string {
  return typeof id === 'string' && ID.test(id);
}

/** Checks the two fields rules and models both have: a valid `id`, and `description` if any. */
export function validateIdAndDescription(
  o: Record<string, unknown>,
  at: string,
  problems: Problem[],
): void {
  if (!isValidId(o.id))
    problems.push({
      pointer: pointer(at, 'id'),
      message:
        'id must be 1-128 letters, digits, "_" or "-", starting with a letter or digit (it is used as a NATS subject token)',
    });
  if (o.description !== undefined && typeof o.description !== 'string')
    problems.push({ pointer: pointer(at, 'description'), message: 'description must be a string' });
}

function isRange(v: unknown): v is [number, number] {
  return (
    Array.isArray(v) &&
    v.length === 2 &&
    v.every((x) => typeof x === 'number' && Number.isFinite(x)) &&
    (v[0] as number) <= (v[1] as number)
  );
}

function validateFeatures(model: Record<string, unknown>, at: string, problems: Problem[]): void {
  const features = model.features;
  const message =
    'features must be a non-empty array of {"name", "field"?, "transform"?, "default"?, "clamp"?}';
  if (!nonEmptyArrayAt(features, pointer(at, 'features'), message, problems)) return;
  const names = new Set<string>();
  features.forEach((f: unknown, i) => {
    const fat = pointer(at, 'features', i);
    if (!isObject(f) || typeof f.name !== 'string' || f.name.length === 0) {
      problems.push({ pointer: fat, message: 'a feature needs a non-empty "name"' });
      return;
    }
    if (names.has(f.name))
      problems.push({
        pointer: pointer(fat, 'name'),
        message: `feature "${f.name}" is listed twice`,
      });
    names.add(f.name);
    const field = f.field ?? f.name;
    if (typeof field !== 'string' || FORBIDDEN_NAMES.has(field))
      problems.push({
        pointer: pointer(fat, 'field'),
        message: 'field must name an event field (not __proto__, constructor or prototype)',
      });
    if (
      f.transform !== undefined &&
      !['identity', 'log1p', 'bool'].includes(f.transform as string)
    ) {
      problems.push({
        pointer: pointer(fat, 'transform'),
        message: 'transform must be "identity", "log1p" or "bool"',
      });
    }
    if (f.default !== undefined && (typeof f.default !== 'number' || !Number.isFinite(f.default))) {
      problems.push({
        pointer: pointer(fat, 'default'),
        message: 'default must be a finite number',
      });
    }
    if (f.clamp !== undefined && !isRange(f.clamp))
      problems.push({
        pointer: pointer(fat, 'clamp'),
        message: 'clamp must be [min, max] with min <= max',
      });
  });
  const weights = model.weights;
  const weightsMessage = 'weights must be an object mapping each feature name to a number';
  if (!objectAt(weights, pointer(at, 'weights'), weightsMessage, problems)) return;
  for (const name of names) {
    const w = weights[name];
    if (typeof w !== 'number' || !Number.isFinite(w))
      problems.push({
        pointer: pointer(at, 'weights', name),
        message: `feature "${name}" needs a finite numeric weight`,
      });
  }
  for (const k of Object.keys(weights)) {
    if (!names.has(k))
      problems.push({
        pointer: pointer(at, 'weights', k),
        message: `weight "${k}" names no feature; add the feature or remove the weight`,
      });
  }
}

/** Validates a model definition, appending every problem found. */
export function validateModel(
  model: unknown,
  at: string,
  limits: RuleLimits,
  problems: Problem[],
): model is Model {
  const before = problems.length;
  const message =
    'a model must be an object with "id" and "kind" ("logistic", "linear" or "lookup")';
  if (!objectAt(model, at, message, problems)) return false;
  validateIdAndDescription(model, at, problems);
  switch (model.kind) {
    case 'logistic':
    case 'linear':
      validateFeatures(model, at, problems);
      if (
        model.bias !== undefined &&
        (typeof model.bias !== 'number' || !Number.isFinite(model.bias))
      )
        problems.push({ pointer: pointer(at, 'bias'), message: 'bias must be a finite number' });
      if (model.clamp !== undefined && !isRange(model.clamp))
        problems.push({
          pointer: pointer(at, 'clamp'),
          message: 'clamp must be [min, max] with min <= max',
        });
      break;
    case 'lookup': {
      const hasValues = model.values !== undefined;
      const hasEntries = model.entries !== undefined;
      if (hasValues === hasEntries) {
        problems.push({
          pointer: at,
          message:
            'a lookup needs exactly one of "values" (a set, e.g. a blocklist) or "entries" (a map)',
        });
        break;
      }
      if (hasValues) {
        const values = model.values;
        if (
          !Array.isArray(values) ||
          !values.every(
            (v) => typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v)),
          )
        ) {
          problems.push({
            pointer: pointer(at, 'values'),
            message: 'values must be an array of strings and numbers',
          });
        } else if (values.length > limits.maxLookupEntries) {
          problems.push({
            pointer: pointer(at, 'values'),
            message: `values has ${values.length} items, over the limit of ${limits.maxLookupEntries}`,
          });
        }
      } else if (!isObject(model.entries)) {
        problems.push({
          pointer: pointer(at, 'entries'),
          message: 'entries must be an object mapping keys to values',
        });
      } else {
        const keys = Object.keys(model.entries);
        if (keys.length > limits.maxLookupEntries)
          problems.push({
            pointer: pointer(at, 'entries'),
            message: `entries has ${keys.length} keys, over the limit of ${limits.maxLookupEntries}`,
          });
        const bad = keys.find((k) => FORBIDDEN_NAMES.has(k));
        if (bad !== undefined)
          problems.push({
            pointer: pointer(at, 'entries', bad),
            message: `entries may not have the key "${bad}"`,
          });
      }
      break;
    }
    default:
      problems.push({
        pointer: pointer(at, 'kind'),
        message: `kind must be "logistic", "linear" or "lookup", got ${JSON.stringify(model.kind)}`,
      });
  }
  return problems.length === before;
}

function featureValue(f: Feature, event: Readonly<Record<string, unknown>>): number {
  const field = f.field ?? f.name;
  const raw = Object.hasOwn(event, field) ? event[field] : undefined;
  const fallback = f.default ?? 0;
  let x: number;
  if (f.transform === 'bool') x = raw === true ? 1 : raw === false ? 0 : fallback;
  else if (typeof raw !== 'number' || !Number.isFinite(raw)) x = fallback;
  else x = f.transform === 'log1p' ? Math.log1p(Math.max(raw, 0)) : raw;
  if (f.clamp) x = Math.min(Math.max(x, f.clamp[0]), f.clamp[1]);
  return x;
}

/** Compiles a validated model. Scorers read named features; a missing or non-numeric field uses the feature's default. */
export function compileModel(model: Model): CompiledModel {
  if (model.kind === 'lookup') {
    if (model.values !== undefined) {
      const values = Object.freeze([...model.values]);
      return { kind: 'set', def: model, set: new Set(values), values };
    }
    const entries = Object.freeze({ ...(model.entries ?? {}) });
    return { kind: 'map', def: model, map: new Map(Object.entries(entries)), entries };
  }
  const features = model.features.map((f) => ({ f, w: model.weights[f.name] ?? 0 }));
  const bias = model.bias ?? 0;
  const logistic = model.kind === 'logistic';
  const clamp = model.clamp;
  return {
    kind: 'scorer',
    def: model,
    score(event) {
      let z = bias;
      for (const { f, w } of features) z += w * featureValue(f, event);
      let s = logistic ? 1 / (1 + Math.exp(-z)) : z;
      if (clamp) s = Math.min(Math.max(s, clamp[0]), clamp[1]);
      return s;
    },
  };
}

/**
 * The value of a `list:<id>` fact. Without `params.key`: the set's values (an array) or the map's
 * entries (an object). With `params.key`: for a set, whether the event's field is in it; for a
 * map, the entry for the event's field (undefined when absent).
 */
export function lookupFact(
  model: CompiledModel,
  event: Readonly<Record<string, unknown>>,
  key: string | undefined,
): unknown {
  if (model.kind === 'scorer') return undefined;
  if (key === undefined) return model.kind === 'set' ? model.values : model.entries;
  const v = Object.hasOwn(event, key) ? event[key] : undefined;
  if (model.kind === 'set') return model.set.has(v);
  return typeof v === 'string' || typeof v === 'number' ? model.map.get(String(v)) : undefined;
}
