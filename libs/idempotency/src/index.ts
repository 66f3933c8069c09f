/**
 * `nestjs-idempotency`: what an application author uses. Everything here is public API, covered
 * by semver (`@publicApi`). Stores and integrations that need an optional peer live behind their
 * own entry points (`/redis`, `/typeorm`, `/bullmq`, `/terminus`), as do the message consumers
 * (`/consumers`), the operator's tools (`/admin`), the telemetry names (`/telemetry`) and the store
 * contract suites (`/testing`), so importing this one loads none of those peers.
 */

// The module and its options
export { IdempotencyModule } from './idempotency.module.js';
export type { IdempotencyModuleExtras, IdempotencyOptionsFactory } from './idempotency.module-definition.js';
export { fromClientIp, fromHeader, fromUser } from './http/scope-resolvers.js';
export type {
  FingerprintOption,
  IdempotencyHttpRequest,
  IdempotencyIsolationLevel,
  IdempotencyModuleOptions,
  IdempotencyPolicyOptions,
  IdempotentOptions,
  InProgressOptions,
  ReaperOptions,
  ReplayHeaderOptions,
  ScopeResolver,
} from './interfaces/idempotency-module-options.interface.js';
export type { ScopeDimension } from './engine/scoped-key.js';
export type { KeySyntax } from './http/idempotency-key.parser.js';
export type { JsonFingerprintMode } from './http/fingerprint/fingerprint.js';
export type { IdempotencyEncryptionKey, IdempotencyEncryptionOptions } from './security/idempotency-cipher.js';

// Routes: the decorators and what a handler sees
export { createIdempotentDecorator, Idempotent } from './decorators/idempotent.decorator.js';
export { IdempotencyContext } from './decorators/idempotency-context.decorator.js';
export { IdempotencyOutcome } from './decorators/idempotency-outcome.decorator.js';
export { SkipIdempotency } from './decorators/skip-idempotency.decorator.js';
export { IdempotencyContextAccessor } from './context/idempotency-context.accessor.js';
export { IdempotencyContextRef } from './engine/idempotency-context.js';
export type { OutcomeOverride } from './engine/outcome-policy.js';
export { IdempotencyInterceptor, type ResolvedScope } from './http/idempotency.interceptor.js';
// What the interceptor's protected hooks take and return, for subclasses
export type { ResolvedPolicy } from './idempotency.options.js';
export type { ParsedKey } from './http/idempotency-key.parser.js';
export type { ProblemOptions as IdempotencyProblemOptions } from './http/problem-responses.js';
export {
  IdempotencyFinalException,
  IdempotencyTransientException,
  IdempotencyFinalError,
  IdempotencyTransientError,
} from './errors/idempotency-outcome.exceptions.js';

// Beyond HTTP: IdempotencyService.run()
export { IdempotencyService } from './engine/idempotency.service.js';
export type { RunRequest, RunResult } from './engine/idempotency-engine.types.js';
export { IdempotencyRunError, type IdempotencyRunErrorKind } from './errors/idempotency-run.error.js';
export { IdempotencyProblemFilter } from './http/problem-details.filter.js';

// Errors and the problem responses (RFC 9457)
export { IdempotencyError } from './errors/idempotency.error.js';
export {
  IdempotencyProblemException,
  type IdempotencyProblemKind,
  type ProblemDetails,
} from './errors/idempotency.exceptions.js';
export { IdempotencyConfigurationError } from './errors/idempotency-configuration.error.js';
export { IdempotencyScopeError } from './engine/scoped-key.js';
export { IdempotencyStoreError } from './errors/idempotency-store.error.js';
export { IdempotencyRecordUnreadableError } from './errors/idempotency-record-unreadable.error.js';

// Stores: the two contracts, the in-memory store, and the types their methods use
export {
  IdempotencyStore,
  type ClaimRequest,
  type ClaimResult,
  type ForceDeleteScope,
  type InProgressEntry,
} from './stores/idempotency-store.js';
export {
  DurableIdempotencyStore,
  type DurableClaimTransaction,
  type DurableTransaction,
  type DurableTransactionOptions,
  type TransactionalClaimResult,
} from './stores/durable-idempotency-store.js';
export { MemoryIdempotencyStore, type MemoryIdempotencyStoreOptions } from './stores/memory-idempotency.store.js';
export type {
  IdempotencyRecord,
  IdempotencyRecordState,
  StoredResponse,
} from './interfaces/idempotency-record.interface.js';
export { IdempotencyClaimLostError } from './errors/idempotency-claim-lost.error.js';
export {
  IdempotencyIsolationError,
  IdempotencyNestedTransactionError,
} from './errors/idempotency-transaction.errors.js';

// HTTP names
export { IDEMPOTENCY_CORS, IDEMPOTENCY_KEY_HEADER, IDEMPOTENT_REPLAYED_HEADER } from './idempotency.constants.js';
