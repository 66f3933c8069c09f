import {
  DEFAULT_LEASE_MS,
  DEFAULT_MAX_FINGERPRINTED_BODY_BYTES,
  DEFAULT_MAX_STORED_RESPONSE_BYTES,
  DEFAULT_PROBLEM_TYPE_BASE_URI,
  DEFAULT_TTL_MS,
  HEARTBEATS_PER_LEASE,
  IDEMPOTENT_REPLAYED_HEADER,
} from './idempotency.constants.js';
import type {
  IdempotencyHttpRequest,
  IdempotencyIsolationLevel,
  IdempotencyModuleOptions,
  IdempotencyPolicyOptions,
  IdempotentOptions,
  InProgressOptions,
  ReplayHeaderOptions,
  ScopeResolver,
} from './interfaces/idempotency-module-options.interface.js';
import { outcomeUnknownResponse } from './errors/outcome-unknown.response.js';
import type { StoredResponse } from './interfaces/idempotency-record.interface.js';
import { IdempotencyCipher } from './security/idempotency-cipher.js';
import { checkDurability, checkNestedOptions, validatePolicy } from './idempotency-options.checks.js';

type Required2<T> = { [K in keyof T]-?: Exclude<T[K], undefined> };

/** A route's policy with every default applied: what the engine and the adapters read. */
export interface ResolvedPolicy extends Required2<
  Omit<IdempotencyPolicyOptions, 'keyPattern' | 'inProgress' | 'replayHeader' | 'isolationLevel'>
> {
  keyPattern?: RegExp;
  /** The route's transaction isolation (`transactional` routes); undefined: the database's default. */
  isolationLevel?: IdempotencyIsolationLevel;
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
  /** The 500 problem the engine stores for a key whose outcome is unknown (`staleLock: 'fail'`). */
  outcomeUnknownResponse: () => StoredResponse;
  /** Global mode: every route in `methods` is protected unless `@SkipIdempotency()`. */
  protectAllRoutes: boolean;
}

const DEFAULT_POLICY: Required2<Omit<IdempotencyPolicyOptions, 'keyPattern' | 'heartbeatMs' | 'isolationLevel'>> = {
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
  answerTimeoutMs: 300_000,
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
export function resolveModuleSettings(
  options: IdempotencyModuleOptions,
  protectAllRoutes = false,
): ResolvedModuleSettings {
  const base = options.problemTypeBaseUri ?? DEFAULT_PROBLEM_TYPE_BASE_URI;
  const problemTypeBaseUri = base.endsWith('/') ? base : `${base}/`;
  const problemLanguage = options.problemLanguage ?? 'en';
  return {
    tenant: options.tenant,
    principal: options.principal ?? principalFromUser,
    anonymousScope: options.anonymousScope,
    problemTypeBaseUri,
    docsUrl: options.docsUrl,
    problemLanguage,
    policyOptions: options,
    cipher: options.encryption ? new IdempotencyCipher(options.encryption) : undefined,
    outcomeUnknownResponse: () => outcomeUnknownResponse(problemTypeBaseUri, problemLanguage),
    protectAllRoutes,
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
  const methods = pick('methods');
  const policy: ResolvedPolicy = {
    methods,
    // Tolerant of wrong types here: validatePolicy names the option instead of a TypeError.
    methodSet: new Set(Array.isArray(methods) ? methods.map((m) => String(m).toUpperCase()) : []),
    required: pick('required'),
    keySyntax: pick('keySyntax'),
    maxKeyLength: pick('maxKeyLength'),
    minKeyLength: pick('minKeyLength'),
    keyPattern: routeOptions.keyPattern ?? moduleOptions.keyPattern,
    scope: Array.isArray(pick('scope')) ? [...pick('scope')] : pick('scope'),
    fingerprint:
      typeof fingerprint === 'object'
        ? { json: fingerprint.json ?? 'lossless', headers: lowerCased(fingerprint.headers ?? []) }
        : fingerprint,
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
    heartbeatMs: routeOptions.heartbeatMs ?? moduleOptions.heartbeatMs ?? heartbeatFor(pick('leaseMs')),
    answerTimeoutMs: pick('answerTimeoutMs'),
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
    isolationLevel: routeOptions.isolationLevel ?? moduleOptions.isolationLevel,
  };
  validatePolicy(policy);
  checkNestedOptions(moduleOptions, routeOptions);
  checkDurability(moduleOptions, routeOptions, policy);
  return policy;
}

/** Unless set, the heartbeat follows the lease: a third of it, so two renewals may fail before it lapses. */
function heartbeatFor(leaseMs: number): number {
  return Number.isSafeInteger(leaseMs) && leaseMs > 0
    ? Math.max(1, Math.floor(leaseMs / HEARTBEATS_PER_LEASE))
    : leaseMs;
}

function lowerCased(names: string[]): string[] {
  return Array.isArray(names) ? names.map((name) => (typeof name === 'string' ? name.toLowerCase() : name)) : names;
}

/** The fields of `options` that are set: an explicit `undefined` must not hide a default. */
function defined<T extends object>(options: T | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(options ?? {}).filter(([, value]) => value !== undefined)) as Partial<T>;
}

/** setTimeout's ceiling (a signed 32-bit integer): a longer delay fires at once. */
