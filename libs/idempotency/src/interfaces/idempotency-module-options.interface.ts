import type { ExecutionContext } from '@nestjs/common';
import type { KeySyntax } from '../http/idempotency-key.parser.js';
import type { JsonFingerprintMode } from '../http/fingerprint/fingerprint.js';
import type { ScopeDimension } from '../engine/scoped-key.js';
import type { IdempotencyEncryptionOptions } from '../security/idempotency-cipher.js';
import type { DurableIdempotencyStore } from '../stores/durable-idempotency-store.js';
import type { IdempotencyStore } from '../stores/idempotency-store.js';

/**
 * The request object of the platform in use (Express `Request` or Fastify `FastifyRequest`).
 * Resolvers receive it as is.
 *
 * @publicApi
 */
export type IdempotencyHttpRequest = {
  headers: Record<string, string | string[] | undefined>;
  method: string;
  [key: string]: unknown;
};

/**
 * Returns the tenant, the principal or an anonymous bucket of a request. `undefined` means
 * "cannot be resolved": a protected request then fails with 500 (docs/contract.md B.3 rule 13), it never
 * falls back to a global namespace. It receives the platform's request and the route's
 * `ExecutionContext` (for metadata of the handler or its class, as throttler's `getTracker`).
 * `fromHeader()`, `fromUser()` and `fromClientIp()` build the usual ones.
 *
 * @example
 * tenant: fromHeader('x-tenant-id')
 * @example
 * tenant: (req, context) => reflector.get(TENANT_FROM_PATH, context.getHandler()) ? String(req.params?.tenantId) : undefined
 * @publicApi
 */
export type ScopeResolver = (
  request: IdempotencyHttpRequest,
  context: ExecutionContext,
) => string | undefined | Promise<string | undefined>;

/**
 * How the request fingerprint is computed (docs/contract.md B.4): the built-in canonical fingerprint
 * with these settings, or a function that replaces it (rule 16).
 *
 * @publicApi
 */
export type FingerprintOption =
  | {
      /** JSON bodies: `lossless` canonical JSON (numbers as written), `jcs` (RFC 8785), or `raw-bytes`. @default 'lossless' */
      json?: JsonFingerprintMode;
      /** Request headers that take part in the fingerprint, e.g. an API-version header. @default [] */
      headers?: string[];
    }
  | ((request: IdempotencyHttpRequest) => string | Buffer);

/**
 * What a duplicate does while the original is still running (docs/contract.md B.9 rule 26).
 *
 * @publicApi
 */
export interface InProgressOptions {
  /** `reject`: 409 with `Retry-After`. `wait`: wait for the original, then replay it. @default 'reject' */
  mode?: 'reject' | 'wait';
  /** In `wait` mode, how long a duplicate waits before it gets the 409, in ms. @default 5000 */
  maxWaitMs?: number;
  /** A fixed `Retry-After` in seconds instead of the remaining lease. @default undefined */
  retryAfterSeconds?: number;
  /** Upper bound of the computed `Retry-After`, in seconds. @default 5 */
  maxRetryAfterSeconds?: number;
}

/**
 * The replay marker (docs/contract.md B.6).
 *
 * @publicApi
 */
export interface ReplayHeaderOptions {
  /** Header name, e.g. `Idempotency-Replayed` or `X-Idempotent-Replayed`. @default 'Idempotent-Replayed' */
  name?: string;
  /** Also send the header on fresh executions, with the value false. @default false */
  onFresh?: boolean;
  /** `boolean`: `true`/`false`. `sf-boolean`: RFC 9651 `?1`/`?0`. @default 'boolean' */
  format?: 'boolean' | 'sf-boolean';
}

/**
 * The part of the policy that a route may override with `@Idempotent({...})`. Every field
 * defaults to the module's value, which defaults to what is documented here (docs/contract.md B.12).
 *
 * @publicApi
 */
export interface IdempotencyPolicyOptions {
  /** HTTP methods the layer protects; all others pass through untouched (B.1). @default ['POST', 'PATCH'] */
  methods?: string[];
  /** A missing key is a 400 `idempotency-key-missing` instead of running unprotected (B.2 rule 8). @default false */
  required?: boolean;
  /** `compat` accepts bare tokens and quoted sf-strings; `sf-string` only the latter (B.2 rule 5). @default 'compat' */
  keySyntax?: KeySyntax;
  /** Longest accepted key, in characters after unescaping. @default 255 */
  maxKeyLength?: number;
  /** Shortest accepted key, in characters. @default 1 */
  minKeyLength?: number;
  /** A pattern the key must match, e.g. UUIDs only. @default undefined */
  keyPattern?: RegExp;
  /** What a key is unique within (B.3). With `['tenant']`, principal and operation go into the fingerprint. @default ['tenant', 'principal', 'operation'] */
  scope?: ScopeDimension[];
  /** Fingerprint settings or a custom function (B.4). @default { json: 'lossless', headers: [] } */
  fingerprint?: FingerprintOption;
  /** Status of the "same key, different payload" problem. @default 422 */
  mismatchStatus?: 400 | 409 | 422;
  /** Behaviour towards a duplicate of a running request (B.9). */
  inProgress?: InProgressOptions;
  /** Store 5xx responses and replay them (Stripe v1) instead of releasing the key (B.7 rule 18). @default false */
  storeServerErrors?: boolean;
  /** Store 4xx responses (except 408, 423, 425, 429) (B.7 rule 20). @default true */
  storeClientErrors?: boolean;
  /** How long a record lives from its first claim, in ms (B.10). Must be at least 2 × `leaseMs`. @default 86_400_000 (24 h) */
  ttlMs?: number;
  /** How long a claim lives without a heartbeat, in ms (B.9 rule 25). @default 30_000 */
  leaseMs?: number;
  /**
   * How often a running handler renews its lease, in ms. At most half of `leaseMs`. Unset, it
   * follows the lease: a third of `leaseMs` (10_000 for the default 30 s lease).
   * @default leaseMs / 3
   */
  heartbeatMs?: number;
  /**
   * How long the record waits for the handler's answer once the handler has returned, in ms
   * (B.7 rule 17a): a `@Res()` handler's own write, or the route's rendering of its result. The
   * claim stays live (heartbeat) meanwhile. On expiry a `@Res()` handler that never answered has
   * its claim released (no success is recorded that no one saw), and any other handler's result
   * is recorded as Nest would render it. @default 300_000 (5 min)
   */
  answerTimeoutMs?: number;
  /** What the first request to find a dead lease does: run again (`takeover`) or store a final 500 (`fail`) (B.9 rules 27, 28). @default 'takeover' */
  staleLock?: 'takeover' | 'fail';
  /** The replay marker header. */
  replayHeader?: ReplayHeaderOptions;
  /** Echo the received `Idempotency-Key` on responses. @default true */
  echoKey?: boolean;
  /** Largest response body stored for replay, in bytes; above it the record keeps no body (B.8 rule 23). @default 1_048_576 */
  maxStoredResponseBytes?: number;
  /**
   * Largest request body a protected request may carry, in bytes: it is canonicalized and hashed
   * for the fingerprint, so its size is bounded. Above it: `413 idempotency-request-too-large`,
   * the handler does not run and nothing is stored. @default 1_048_576
   */
  maxFingerprintedBodyBytes?: number;
  /** `fail-closed`: 503 and the handler does not run when the store fails; `fail-open`: run unprotected (B.10 rule 32). @default 'fail-closed' */
  onStoreError?: 'fail-closed' | 'fail-open';
  /**
   * Confirm every fresh claim in the durable store before the handler runs, and let it decide
   * whenever the fast tier has lost a record or holds a dead lease (DESIGN, steps 4 and 7).
   * Needs `durableStore`. @default false
   */
  durable?: boolean;
  /**
   * Run the handler inside a database transaction of the durable store and commit the completed
   * record in it, so the business writes and the record commit together (DESIGN, step 6). The
   * handler gets the transaction's `EntityManager` from `IdempotencyContextRef.manager`.
   * Implies `durable`. @default false
   */
  transactional?: boolean;
  /**
   * `transactional` routes: the isolation level their transaction BEGINs at (set per route, or
   * for the whole module). Asking for a stronger level inside the route (`manager.transaction('SERIALIZABLE', ...)`)
   * fails with `IdempotencyIsolationError` instead of silently running at the route's level: set it
   * here. Under `REPEATABLE READ` and `SERIALIZABLE` a serialization failure or deadlock anywhere in
   * the route (claim, handler, completion, COMMIT) rolls everything back, frees the key and answers
   * `503` with `Retry-After: 1` (docs/durable-tier.md, "Isolation levels").
   * @default undefined (the database's default, `READ COMMITTED` on PostgreSQL)
   */
  isolationLevel?: IdempotencyIsolationLevel;
}

/**
 * The isolation levels a transactional route may BEGIN at (SQL's names; TypeORM's `IsolationLevel`).
 *
 * @publicApi
 */
export type IdempotencyIsolationLevel = 'READ UNCOMMITTED' | 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';

/**
 * The reaper deletes expired durable records in batches (DESIGN "Operations").
 *
 * @publicApi
 */
export interface ReaperOptions {
  /** Time between two sweeps, in ms. @default 60_000 */
  intervalMs?: number;
  /** Rows deleted per statement; a sweep repeats until a batch comes back short. @default 500 */
  batchSize?: number;
}

/**
 * Per-route options of `@Idempotent()`.
 *
 * @publicApi
 */
export interface IdempotentOptions extends IdempotencyPolicyOptions {
  /** Name of the operation in the scope and fingerprint, e.g. `orders.create`. @default `${METHOD} ${route template}` */
  operation?: string;
}

/**
 * Options of `IdempotencyModule.forRoot()` / `forRootAsync()`.
 *
 * @publicApi
 */
export interface IdempotencyModuleOptions extends IdempotencyPolicyOptions {
  /** The fast tier. A store you pass in is yours: the module never closes a client it did not create. @default new MemoryIdempotencyStore() */
  store?: IdempotencyStore;
  /** The durable tier (the authority), for `durable` and `transactional` routes. @default undefined */
  durableStore?: DurableIdempotencyStore;
  /** Delete expired durable records periodically; safe on many instances. `false` or absent: off. @default undefined */
  reaper?: ReaperOptions | false;
  /** Returns the tenant of a request (B.3). @default undefined: a scope that includes 'tenant' cannot be resolved */
  tenant?: ScopeResolver;
  /** Returns the authenticated principal of a request (B.3). @default the `id` or `sub` of `request.user`, as Passport sets it */
  principal?: ScopeResolver;
  /** A bucket for requests whose tenant or principal is missing, e.g. by client IP (B.3 rule 13). @default undefined (such requests fail with 500) */
  anonymousScope?: ScopeResolver;
  /** Base of the problem `type` URIs; point it at your published policy page (B.11). @default 'https://api.example.com/problems/' */
  problemTypeBaseUri?: string;
  /** Documentation page sent as `Link: <docsUrl>; rel="describedby"` on problems. @default undefined */
  docsUrl?: string;
  /** `Content-Language` of problem responses. @default 'en' */
  problemLanguage?: string;
  /**
   * Encrypt stored responses (status in clear; headers, body and `run()` values sealed) with
   * AES-256-GCM under a key ring. New records use `activeKeyId`; older ones open with the key
   * their envelope names. A record that does not open fails closed: `500
   * idempotency-record-unreadable`, and the handler is not run again. @default undefined (stored in clear)
   * @example
   * encryption: { keys: [{ id: '2026-11', key: Buffer.from(process.env.IDEM_KEY_2026_11!, 'base64') }], activeKeyId: '2026-11' }
   */
  encryption?: IdempotencyEncryptionOptions;
}
