/**
 * The checks of a resolved policy (docs/configuration.md, "Checked at startup"): every value no
 * store or timer can honour, or that cannot keep the contract, stops the application with an
 * `IdempotencyConfigurationError` that names the option.
 */
import { IdempotencyConfigurationError } from './errors/idempotency-configuration.error.js';
import type { ResolvedPolicy } from './idempotency.options.js';
import type { IdempotencyPolicyOptions, IdempotentOptions } from './interfaces/idempotency-module-options.interface.js';
import { MAX_DURATION_MS } from './stores/store-arguments.js';

const MAX_TIMER_MS = 2_147_483_647;
const KEY_SYNTAXES = ['compat', 'sf-string'];
const JSON_MODES = ['lossless', 'jcs', 'raw-bytes'];
const SCOPE_DIMENSIONS = ['tenant', 'principal', 'operation'];
/** RFC 9110 `token`: what a method or a header name may be. */
const TOKEN = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;
const BOOLEAN_OPTIONS = [
  'required',
  'storeServerErrors',
  'storeClientErrors',
  'echoKey',
  'durable',
  'transactional',
] as const;

/**
 * Checks a resolved policy once, at startup (module options in the settings provider, every
 * route's in `IdempotentRoutesValidator`): a value no store or timer can honour, or that cannot
 * keep the contract, is an `IdempotencyConfigurationError` that names the option.
 */
export function validatePolicy(p: ResolvedPolicy): void {
  checkDurations(p);
  checkKeyRules(p);
  checkRequestRules(p);
  checkInProgress(p.inProgress);
  checkResponseRules(p);
  for (const name of BOOLEAN_OPTIONS) {
    if (typeof p[name] !== 'boolean') fail(`${name} must be true or false, got ${describe(p[name])}.`);
  }
  if (!['takeover', 'fail'].includes(p.staleLock))
    fail(`staleLock must be 'takeover' or 'fail', got ${describe(p.staleLock)}.`);
  if (!['fail-closed', 'fail-open'].includes(p.onStoreError)) {
    fail(`onStoreError must be 'fail-closed' or 'fail-open', got ${describe(p.onStoreError)}.`);
  }
  if (p.onStoreError === 'fail-open' && p.durable) {
    fail(
      `onStoreError: 'fail-open' cannot be used with ${p.transactional ? 'transactional' : 'durable'}: a durable route ` +
        'promises that the durable record decides whether the handler runs (and a transactional handler needs the ' +
        "store's transaction), so it cannot run unprotected. Use 'fail-closed', or drop durable/transactional.",
    );
  }
  const levels = ['READ UNCOMMITTED', 'READ COMMITTED', 'REPEATABLE READ', 'SERIALIZABLE'];
  if (p.isolationLevel !== undefined && !levels.includes(p.isolationLevel)) {
    fail(
      `isolationLevel must be one of ${levels.map((level) => `'${level}'`).join(', ')}, got ${describe(p.isolationLevel)}.`,
    );
  }
  if (p.operation !== undefined && (typeof p.operation !== 'string' || p.operation.length === 0)) {
    fail(`operation must be a non-empty string, got ${describe(p.operation)}.`);
  }
}

/** Leases, heartbeats and the TTL: whole milliseconds that the stores and timers can hold (docs/contract.md B.9, B.10). */
function checkDurations(p: ResolvedPolicy): void {
  const duration = (name: string, value: number, max: number, maxLabel: string) => {
    if (!Number.isSafeInteger(value) || value <= 0) {
      fail(`${name} must be a positive integer number of milliseconds, got ${describe(value)}.`);
    }
    if (value > max) fail(`${name} must be at most ${max} (${maxLabel}), got ${value}.`);
  };
  duration('ttlMs', p.ttlMs, MAX_DURATION_MS, 'about 100 years: the longest time the stores hold a record');
  duration('leaseMs', p.leaseMs, MAX_TIMER_MS, 'the longest delay of a JavaScript timer');
  duration('heartbeatMs', p.heartbeatMs, MAX_TIMER_MS, 'the longest delay of a JavaScript timer');
  duration('answerTimeoutMs', p.answerTimeoutMs, MAX_TIMER_MS, 'the longest delay of a JavaScript timer');
  if (p.heartbeatMs * 2 > p.leaseMs) {
    fail(
      `heartbeatMs (${p.heartbeatMs}) must be at most half of leaseMs (${p.leaseMs}), so one late renewal does not lose a live claim.`,
    );
  }
  if (p.ttlMs < 2 * p.leaseMs)
    fail(`ttlMs (${p.ttlMs}) must be at least 2 × leaseMs (${p.leaseMs}) (docs/contract.md B.9 rule 29).`);
}

function checkKeyRules(p: ResolvedPolicy): void {
  if (!KEY_SYNTAXES.includes(p.keySyntax))
    fail(`keySyntax must be 'compat' or 'sf-string', got ${describe(p.keySyntax)}.`);
  if (!Number.isSafeInteger(p.minKeyLength) || p.minKeyLength < 1) {
    fail(`minKeyLength must be an integer ≥ 1, got ${describe(p.minKeyLength)}.`);
  }
  if (!Number.isSafeInteger(p.maxKeyLength) || p.maxKeyLength < p.minKeyLength) {
    fail(`maxKeyLength must be an integer ≥ minKeyLength (${p.minKeyLength}), got ${describe(p.maxKeyLength)}.`);
  }
  if (p.keyPattern !== undefined && !(p.keyPattern instanceof RegExp))
    fail(`keyPattern must be a RegExp, got ${describe(p.keyPattern)}.`);
  if (!Array.isArray(p.scope) || p.scope.length === 0 || p.scope.some((d) => !SCOPE_DIMENSIONS.includes(d))) {
    fail(`scope must list some of 'tenant', 'principal', 'operation', got ${JSON.stringify(p.scope)}.`);
  }
}

function checkRequestRules(p: ResolvedPolicy): void {
  if (
    !Array.isArray(p.methods) ||
    p.methods.length === 0 ||
    p.methods.some((m) => typeof m !== 'string' || !TOKEN.test(m))
  ) {
    fail(`methods must be a non-empty list of HTTP method names, got ${JSON.stringify(p.methods)}.`);
  }
  const fingerprint = p.fingerprint;
  if (typeof fingerprint !== 'function') {
    if (typeof fingerprint !== 'object')
      fail(`fingerprint must be { json?, headers? } or a function, got ${describe(fingerprint)}.`);
    const { json, headers } = fingerprint;
    if (!JSON_MODES.includes(json as string))
      fail(`fingerprint.json must be 'lossless', 'jcs' or 'raw-bytes', got ${describe(json)}.`);
    if (!Array.isArray(headers) || !headers.every((h) => typeof h === 'string' && TOKEN.test(h))) {
      fail(`fingerprint.headers must be a list of header names, got ${describe(headers)}.`);
    }
  }
  if (!Number.isSafeInteger(p.maxFingerprintedBodyBytes) || p.maxFingerprintedBodyBytes <= 0) {
    fail(
      `maxFingerprintedBodyBytes must be a positive integer number of bytes, got ${describe(p.maxFingerprintedBodyBytes)}.`,
    );
  }
  if (![400, 409, 422].includes(p.mismatchStatus))
    fail(`mismatchStatus must be 400, 409 or 422, got ${describe(p.mismatchStatus)}.`);
}

function checkInProgress(p: ResolvedPolicy['inProgress']): void {
  if (!['reject', 'wait'].includes(p.mode))
    fail(`inProgress.mode must be 'reject' or 'wait', got ${describe(p.mode)}.`);
  if (!Number.isInteger(p.maxWaitMs) || p.maxWaitMs < 0 || p.maxWaitMs > MAX_TIMER_MS) {
    fail(
      `inProgress.maxWaitMs must be an integer number of milliseconds from 0 to ${MAX_TIMER_MS}, got ${describe(p.maxWaitMs)}.`,
    );
  }
  if (p.retryAfterSeconds !== undefined && !(Number.isSafeInteger(p.retryAfterSeconds) && p.retryAfterSeconds >= 1)) {
    fail(`inProgress.retryAfterSeconds must be an integer ≥ 1, got ${describe(p.retryAfterSeconds)}.`);
  }
  if (!(Number.isSafeInteger(p.maxRetryAfterSeconds) && p.maxRetryAfterSeconds >= 1)) {
    fail(`inProgress.maxRetryAfterSeconds must be an integer ≥ 1, got ${describe(p.maxRetryAfterSeconds)}.`);
  }
}

function checkResponseRules(p: ResolvedPolicy): void {
  if (!Number.isSafeInteger(p.maxStoredResponseBytes) || p.maxStoredResponseBytes <= 0) {
    fail(
      `maxStoredResponseBytes must be a positive integer number of bytes, got ${describe(p.maxStoredResponseBytes)}.`,
    );
  }
  const header = p.replayHeader;
  if (typeof header.name !== 'string' || !TOKEN.test(header.name)) {
    fail(`replayHeader.name is not a valid header name: ${describe(header.name)}.`);
  }
  if (typeof header.onFresh !== 'boolean')
    fail(`replayHeader.onFresh must be true or false, got ${describe(header.onFresh)}.`);
  if (!['boolean', 'sf-boolean'].includes(header.format)) {
    fail(`replayHeader.format must be 'boolean' or 'sf-boolean', got ${describe(header.format)}.`);
  }
}

/** `inProgress` and `replayHeader` are merged field by field: anything but an object would be dropped silently. */
export function checkNestedOptions(...levels: IdempotencyPolicyOptions[]): void {
  for (const options of levels) {
    for (const name of ['inProgress', 'replayHeader'] as const) {
      const value: unknown = options[name];
      if (value !== undefined && (typeof value !== 'object' || value === null || Array.isArray(value))) {
        fail(`${name} must be an object of options, got ${describe(value)}.`);
      }
    }
  }
}

/**
 * `transactional` implies `durable`; a `durable: false` set beside it (in the same options, or
 * on a route whose module makes it transactional) contradicts it rather than being overridden.
 */
export function checkDurability(
  moduleOptions: IdempotencyPolicyOptions,
  routeOptions: IdempotentOptions,
  p: ResolvedPolicy,
): void {
  const durable =
    routeOptions.transactional === true ? routeOptions.durable : (routeOptions.durable ?? moduleOptions.durable);
  if (p.transactional && durable === false) {
    fail(
      'transactional: true needs a durable record (it implies durable): remove durable: false, or set transactional: false.',
    );
  }
}

function fail(message: string): never {
  throw new IdempotencyConfigurationError(message);
}

/** A value as a message shows it: strings quoted, others as they print. */
function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'function') return 'a function';
  if (value instanceof RegExp) return String(value);
  if (typeof value === 'object' && value !== null) return JSON.stringify(value);
  return String(value);
}
