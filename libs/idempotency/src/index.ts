/**
 * `nestjs-idempotency`: the core. Redis and TypeORM stores live behind their own entry points
 * (`nestjs-idempotency/redis`, `nestjs-idempotency/typeorm`), so this one imports neither.
 */
export { IdempotencyModule } from './idempotency.module.js';
export { IDEMPOTENCY_MODULE_OPTIONS, type IdempotencyOptionsFactory } from './idempotency.module-definition.js';
export * from './idempotency.constants.js';
export { resolvePolicy, type ResolvedPolicy, type ResolvedModuleSettings } from './idempotency.options.js';
export * from './interfaces/index.js';
export * from './decorators/index.js';
export { IdempotencyInterceptor, type ResolvedScope } from './interceptors/idempotency.interceptor.js';
export {
  IdempotencyService,
  IdempotencyClaim,
  type BeginRequest,
  type BeginResult,
  type Execution,
  type ExecutionResult,
  type FinishResult,
  type HandlerOutcome,
  type RunRequest,
  type RunResult,
} from './engine/idempotency.service.js';
export { IdempotencyContextRef } from './engine/idempotency-context.js';
export { IdempotencyReaper } from './engine/idempotency-reaper.js';
export { decideOutcome, type OutcomeOverride, type OutcomePolicy } from './engine/outcome-policy.js';
export { parseIdempotencyKey, type KeyRules, type KeySyntax, type ParsedKey } from './engine/idempotency-key.parser.js';
export { computeFingerprint, canonicalizeJson, type FingerprintInput, type JsonFingerprintMode } from './engine/fingerprint.js';
export { buildScopedKey, derivedKey, type ScopeDimension, type ScopedKey, type ScopeParts } from './engine/scoped-key.js';
export { newOwnerToken } from './engine/owner-token.js';
export { IdempotencyStore, type ClaimRequest, type ClaimResult } from './stores/idempotency-store.js';
export { MemoryIdempotencyStore, type MemoryIdempotencyStoreOptions } from './stores/memory-idempotency.store.js';
export { DurableIdempotencyStore, type DurableTransaction } from './stores/durable-idempotency-store.js';
export * from './errors/idempotency.exceptions.js';
export * from './errors/idempotency-outcome.errors.js';
export { IdempotencyStoreError } from './errors/idempotency-store.error.js';
export { IdempotencyClaimLostError } from './errors/idempotency-claim-lost.error.js';
export { IdempotencyRunError, type IdempotencyRunErrorKind } from './errors/idempotency-run.error.js';
export { IdempotencyConfigurationError } from './errors/idempotency-configuration.error.js';
export { IdempotencyRecordUnreadableError } from './errors/idempotency-record-unreadable.error.js';
export { IdempotencyCipher, type IdempotencyEncryptionKey, type IdempotencyEncryptionOptions } from './security/idempotency-cipher.js';
export * from './consumers/index.js';
export { IdempotencyProblemFilter } from './errors/problem-details.filter.js';
export * from './telemetry/index.js';
export * from './admin/index.js';
export { IdempotencyScopeError } from './engine/scoped-key.js';
export type { ForceDeleteScope, InProgressEntry } from './stores/idempotency-store.js';
