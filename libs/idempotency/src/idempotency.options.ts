import {
  DEFAULT_HEARTBEAT_MS,
  DEFAULT_LEASE_MS,
  DEFAULT_MAX_FINGERPRINTED_BODY_BYTES,
  DEFAULT_MAX_STORED_RESPONSE_BYTES,
  DEFAULT_PROBLEM_TYPE_BASE_URI,
  DEFAULT_TTL_MS,
  IDEMPOTENT_REPLAYED_HEADER,
} from './idempotency.constants.js';
import type {
  IdempotencyHttpRequest,
  IdempotencyModuleOptions,
  IdempotencyPolicyOptions,
  IdempotentOptions,
  InProgressOptions,
  ReplayHeaderOptions,
  ScopeResolver,
} from './interfaces/idempotency-module-options.interface.js';
import { IdempotencyConfigurationError } from './errors/idempotency-configuration.error.js';
import { IdempotencyCipher } from './security/idempotency-cipher.js';

type Required2<T> = { [K in keyof T]-?: Exclude<T[K], undefined> };

/** A route's policy with every default applied: what the engine and the adapters read. */
export interface ResolvedPolicy
  extends Required2<Omit<IdempotencyPolicyOptions, 'keyPattern' | 'inProgress' | 'replayHeader'>> {
  keyPattern?: RegExp;
  inProgress: Required2<Omit<InProgressOptions, 'retryAfterSeconds'>> & { retryAfterSeconds?: number };
  replayHeader: Required2<ReplayHeaderOptions>;
  /** Upper-cased `methods`, for a quick lookup. */
  methodSet: ReadonlySet<string>;
  /** `operation` of the route, when it overrides the default. */
  operation?: string;
}

/** Module-wide settings that no route overrides. */
export interface ResolvedModuleSettings {
  tenant?: ScopeResolver;
  principal: ScopeResolver;
  anonymousScope?: ScopeResolver;
  problemTypeBaseUri: string;
  docsUrl?: string;
  problemLanguage: string;
  /** The module-wide policy options, which routes override. */
  policyOptions: IdempotencyPolicyOptions;
  /** Seals stored responses, when `encryption` is configured. */
  cipher?: IdempotencyCipher;
}

const DEFAULT_POLICY: Required2<Omit<IdempotencyPolicyOptions, 'keyPattern'>> = {
  methods: ['POST', 'PATCH'],
  required: false,
  keySyntax: 'compat',
  maxKeyLength: 255,
  minKeyLength: 1,
  scope: ['tenant', 'principal', 'operation'],
  fingerprint: { json: 'lossless', headers: [] },
  mismatchStatus: 422,
  inProgress: { mode: 'reject', maxWaitMs: 5000, maxRetryAfterSeconds: 5 },
  storeServerErrors: false,
  storeClientErrors: true,
  ttlMs: DEFAULT_TTL_MS,
  leaseMs: DEFAULT_LEASE_MS,
  heartbeatMs: DEFAULT_HEARTBEAT_MS,
  staleLock: 'takeover',
  replayHeader: { name: IDEMPOTENT_REPLAYED_HEADER, onFresh: false, format: 'boolean' },
  echoKey: true,
  maxStoredResponseBytes: DEFAULT_MAX_STORED_RESPONSE_BYTES,
  maxFingerprintedBodyBytes: DEFAULT_MAX_FINGERPRINTED_BODY_BYTES,
  onStoreError: 'fail-closed',
  durable: false,
  transactional: false,
};

/** Passport puts the authenticated user on `request.user`; its `id` (or JWT `sub`) is the principal. */
const principalFromUser: ScopeResolver = (request: IdempotencyHttpRequest) => {
  const user = request.user as { id?: unknown; sub?: unknown } | undefined;
  const id = user?.id ?? user?.sub;
  return typeof id === 'string' || typeof id === 'number' ? String(id) : undefined;
};

/** Module-wide settings with their defaults. Called once, by the module's provider. */
export function resolveModuleSettings(options: IdempotencyModuleOptions): ResolvedModuleSettings {
  const base = options.problemTypeBaseUri ?? DEFAULT_PROBLEM_TYPE_BASE_URI;
  return {
    tenant: options.tenant,
    principal: options.principal ?? principalFromUser,
    anonymousScope: options.anonymousScope,
    problemTypeBaseUri: base.endsWith('/') ? base : `${base}/`,
    docsUrl: options.docsUrl,
    problemLanguage: options.problemLanguage ?? 'en',
    policyOptions: options,
    cipher: options.encryption ? new IdempotencyCipher(options.encryption) : undefined,
  };
}

/**
 * Merges route options over module options over the defaults, and checks the result.
 * Called once per route (the interceptor caches it), never per request.
 */
export function resolvePolicy(
  moduleOptions: IdempotencyPolicyOptions,
  routeOptions: IdempotentOptions = {},
): ResolvedPolicy {
  const pick = <K extends keyof IdempotencyPolicyOptions>(key: K) =>
    (routeOptions[key] ?? moduleOptions[key] ?? DEFAULT_POLICY[key as keyof typeof DEFAULT_POLICY]) as Exclude<
      IdempotencyPolicyOptions[K],
      undefined
    >;
  const fingerprint = pick('fingerprint');
  const policy: ResolvedPolicy = {
    methods: pick('methods'),
    methodSet: new Set(pick('methods').map((m) => m.toUpperCase())),
    required: pick('required'),
    keySyntax: pick('keySyntax'),
    maxKeyLength: pick('maxKeyLength'),
    minKeyLength: pick('minKeyLength'),
    keyPattern: routeOptions.keyPattern ?? moduleOptions.keyPattern,
    scope: [...pick('scope')],
    fingerprint:
      typeof fingerprint === 'function'
        ? fingerprint
        : { json: fingerprint.json ?? 'lossless', headers: (fingerprint.headers ?? []).map((h) => h.toLowerCase()) },
    mismatchStatus: pick('mismatchStatus'),
    inProgress: {
      ...DEFAULT_POLICY.inProgress,
      ...defined(moduleOptions.inProgress),
      ...defined(routeOptions.inProgress),
    } as ResolvedPolicy['inProgress'],
    storeServerErrors: pick('storeServerErrors'),
    storeClientErrors: pick('storeClientErrors'),
    ttlMs: pick('ttlMs'),
    leaseMs: pick('leaseMs'),
    heartbeatMs: pick('heartbeatMs'),
    staleLock: pick('staleLock'),
    replayHeader: {
      ...DEFAULT_POLICY.replayHeader,
      ...defined(moduleOptions.replayHeader),
      ...defined(routeOptions.replayHeader),
    } as ResolvedPolicy['replayHeader'],
    echoKey: pick('echoKey'),
    maxStoredResponseBytes: pick('maxStoredResponseBytes'),
    maxFingerprintedBodyBytes: pick('maxFingerprintedBodyBytes'),
    onStoreError: pick('onStoreError'),
    transactional: pick('transactional'),
    durable: pick('durable') || pick('transactional'),
    operation: routeOptions.operation,
  };
  validatePolicy(policy);
  return policy;
}

/** The fields of `options` that are set: an explicit `undefined` must not hide a default. */
function defined<T extends object>(options: T | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(options ?? {}).filter(([, value]) => value !== undefined)) as Partial<T>;
}

/** setTimeout's ceiling: a longer delay fires at once. */
const MAX_TIMER_MS = 2_147_483_647;

function validatePolicy(p: ResolvedPolicy): void {
  const fail = (message: string) => {
    throw new IdempotencyConfigurationError(message);
  };
  const positive = (name: string, value: number) => {
    if (!Number.isInteger(value) || value <= 0) fail(`${name} must be a positive integer number of milliseconds, got ${value}.`);
  };
  positive('ttlMs', p.ttlMs);
  positive('leaseMs', p.leaseMs);
  positive('heartbeatMs', p.heartbeatMs);
  if (p.ttlMs < 2 * p.leaseMs) fail(`ttlMs (${p.ttlMs}) must be at least 2 × leaseMs (${p.leaseMs}) (CONTRACT B.9 rule 29).`);
  if (p.heartbeatMs * 2 > p.leaseMs) {
    fail(`heartbeatMs (${p.heartbeatMs}) must be at most half of leaseMs (${p.leaseMs}), so one late renewal does not lose a live claim.`);
  }
  if (p.leaseMs > MAX_TIMER_MS) fail(`leaseMs must be at most ${MAX_TIMER_MS}.`);
  if (!Number.isInteger(p.inProgress.maxWaitMs) || p.inProgress.maxWaitMs < 0 || p.inProgress.maxWaitMs > MAX_TIMER_MS) {
    fail(`inProgress.maxWaitMs must be an integer number of milliseconds ≥ 0, got ${p.inProgress.maxWaitMs}.`);
  }
  if (!Number.isInteger(p.minKeyLength) || p.minKeyLength < 1) fail(`minKeyLength must be an integer ≥ 1, got ${p.minKeyLength}.`);
  if (!Number.isInteger(p.maxKeyLength) || p.maxKeyLength < p.minKeyLength) fail(`maxKeyLength must be an integer ≥ minKeyLength, got ${p.maxKeyLength}.`);
  if (p.scope.length === 0 || p.scope.some((d) => !['tenant', 'principal', 'operation'].includes(d))) {
    fail(`scope must list some of 'tenant', 'principal', 'operation', got ${JSON.stringify(p.scope)}.`);
  }
  if (![400, 409, 422].includes(p.mismatchStatus)) fail(`mismatchStatus must be 400, 409 or 422, got ${p.mismatchStatus}.`);
  if (!['reject', 'wait'].includes(p.inProgress.mode)) fail(`inProgress.mode must be 'reject' or 'wait', got ${p.inProgress.mode}.`);
  if (p.inProgress.retryAfterSeconds !== undefined && !(Number.isInteger(p.inProgress.retryAfterSeconds) && p.inProgress.retryAfterSeconds >= 1)) {
    fail('inProgress.retryAfterSeconds must be an integer ≥ 1.');
  }
  if (!(Number.isInteger(p.inProgress.maxRetryAfterSeconds) && p.inProgress.maxRetryAfterSeconds >= 1)) {
    fail('inProgress.maxRetryAfterSeconds must be an integer ≥ 1.');
  }
  if (!['takeover', 'fail'].includes(p.staleLock)) fail(`staleLock must be 'takeover' or 'fail', got ${p.staleLock}.`);
  if (!['fail-closed', 'fail-open'].includes(p.onStoreError)) fail(`onStoreError must be 'fail-closed' or 'fail-open', got ${p.onStoreError}.`);
  if (!Number.isInteger(p.maxStoredResponseBytes) || p.maxStoredResponseBytes < 0) fail('maxStoredResponseBytes must be an integer ≥ 0.');
  if (!Number.isInteger(p.maxFingerprintedBodyBytes) || p.maxFingerprintedBodyBytes < 0) fail('maxFingerprintedBodyBytes must be an integer ≥ 0.');
  if (typeof p.replayHeader.name !== 'string' || !/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(p.replayHeader.name)) fail(`replayHeader.name is not a valid header name: ${p.replayHeader.name}`);
}
