/**
 * Vigil's rules core: the rule language, its validation and compiler, CEP operators, models and
 * the partition state machine. Pure and deterministic; no I/O.
 */
export { alertId } from './alert.js';
export {
  applyControl,
  parseControl,
  restoreRuleSet,
  skipControl,
  validateControl,
  type ControlOutcome,
  type StateChange,
} from './apply-control.js';
export {
  compileCondition,
  evalContext,
  hasHostileObject,
  type CompiledCondition,
  type EvalContext,
} from './compile-condition.js';
export {
  compileRule,
  incompatibility,
  stateId,
  type CompiledPattern,
  type CompiledRule,
} from './compile-rule.js';
export { parseDuration } from './duration.js';
export { conditionGuard, GuardIndex, type Guard } from './guard-index.js';
export {
  explainCondition,
  explainRule,
  type ConditionExplanation,
  type ExplainedCondition,
  type RuleExplanation,
} from './explain.js';
export {
  RuleEvaluationError,
  RulesErrorCode,
  SnapshotError,
  ValidationError,
  VigilError,
  pointer,
  type Problem,
  type VigilErrorOptions,
} from './errors.js';
export { codesOf, ERROR_CODES, ErrorCode, type ErrorCodeInfo } from './error-codes.js';
export { keyCoverage, type KeyCoverage } from './key-coverage.js';
export {
  InvalidReason,
  lateMessage,
  parseEvent,
  type ParseEventResult,
  type ParsedEvent,
} from './event.js';
export { keySpaceOf } from './rule-key.js';
export { rekeyed } from './downstream.js';
export { SourceHop, type HopMessage, type RekeyOptions } from './source-hop.js';
export { FORBIDDEN_NAMES, parsePath, resolveSegments } from './json-path.js';
export { DEFAULT_LIMITS, resolveLimits, type RuleLimits } from './limits.js';
export {
  compileModel,
  isValidId,
  lookupFact,
  validateModel,
  type CompiledModel,
  type ModelRegistry,
} from './models.js';
export { DECORATOR_NAMES, OPERATOR_NAMES, resolveOperator, type OperatorFn } from './operators.js';
export { processRecord } from './partition.js';
export {
  createDownstream,
  createPartition,
  type DownstreamOptions,
  type InvalidEvent,
  type LateEvent,
  type Overflow,
  type PartitionOptions,
  type PartitionRecord,
  type PartitionState,
  type ProcessResult,
  type RestoreOptions,
  type RuleError,
} from './partition-state.js';
export { sourceHorizon } from './downstream-records.js';
export { keyExpiry } from './key-expiry.js';
export { keyedStateCount, stateArenaBytes, stateLineages } from './keyed-access.js';
export {
  buildRuleSet,
  emptyRuleSet,
  ruleSetText,
  ruleSetToJSON,
  type RuleSet,
  type RuleSetAt,
  type RuleSetJSON,
} from './rule-set.js';
export {
  checkpointParts,
  checkpointPartsBytes,
  checkpointRuleSets,
  requeueCheckpoint,
  restorePartitionParts,
  writeCheckpointParts,
  type CheckpointHashes,
  type CheckpointParts,
  type StoredParts,
} from './checkpoint.js';
export { restorePartition, snapshotPartition } from './snapshot.js';
export { EXPIRY_BUCKET_MS, ExpiryReason, expiryBucket, withoutExpiry } from './expiry.js';
export type {
  AbsencePattern,
  Aggregate,
  Alert,
  AlertSpec,
  ChangeMeta,
  Comparison,
  Condition,
  ControlChange,
  ControlMessage,
  ControlOp,
  EventRef,
  Feature,
  LeafCondition,
  LookupModel,
  Model,
  Pattern,
  Rule,
  ScorerModel,
  SequencePattern,
  SequenceStep,
  ThresholdPattern,
  TopCondition,
} from './types.js';
export { CONTROL_OPS } from './types.js';
export { validateRule, type ValidatedRule } from './validate-rule.js';
export {
  newRefs,
  validateTopCondition,
  type ConditionRefs,
  type ConditionScope,
} from './validate-condition.js';
