/**
 * The HTTP adapter of the engine: reads a request, then replays, rejects, or runs it once. Its
 * `protected` hooks are the extension points; the work behind them lives in this folder.
 */
import {
  Inject,
  Injectable,
  Logger,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { of, type Observable } from 'rxjs';
import { enterRequest, runForRequest } from '../context/idempotency-request-context.js';
import { IdempotencyService } from '../engine/idempotency.service.js';
import { IdempotencyRecordUnreadableError } from '../errors/idempotency-record-unreadable.error.js';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type { IdempotencyProblemException, IdempotencyProblemKind } from '../errors/idempotency.exceptions.js';
import type { ResolvedModuleSettings, ResolvedPolicy } from '../idempotency.options.js';
import { IDEMPOTENCY_SETTINGS } from '../idempotency.tokens.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import {
  reenteredAttempt,
  responseAnswered,
  resubscribedWhileClaimed,
  runClaimedRequest,
  type ClaimedRequestDeps,
} from './claimed-request.js';
import { computeFingerprint } from './fingerprint/fingerprint.js';
import { bodyBytesOf, receivedKey, type HttpRequest, type HttpResponse } from './http-request.js';
import { parseIdempotencyKey, type ParsedKey } from './idempotency-key.parser.js';
import { createProblemException, type ProblemOptions } from './problem-responses.js';
import { customFingerprint, FingerprintBodyReader, fingerprintInputOf } from './request-fingerprint.js';
import { resolveScope, type ResolvedScope } from './request-scope.js';
import { RouteStates, type RouteState } from './route-state.js';
import { hasNullBody, pickHeaders, replayedHeaders, writeAnswer } from './stored-answer.js';

export type { ResolvedScope } from './request-scope.js';

/**
 * Set on a request while its first subscription is still deciding, before any handler of theirs
 * runs. A field on the request rather than a `WeakSet`: a weak collection entry per request costs
 * more and, keyed by young objects, makes work for every young-generation collection.
 */
const DECIDING = Symbol('idempotency.deciding');
type DecidingMark = { [DECIDING]?: boolean };
const deciding = {
  has: (request: object) => (request as DecidingMark)[DECIDING] === true,
  add: (request: object) => void ((request as DecidingMark)[DECIDING] = true),
  // Cleared by assignment: a `delete` would turn Node's request object into a slow dictionary.
  delete: (request: object) => void ((request as DecidingMark)[DECIDING] = false),
};

/**
 * The HTTP adapter of the engine (docs/contract.md B.1–B.11): reads the key, resolves the scope,
 * fingerprints the request, then replays, rejects, or runs the handler once and stores what it
 * answered. Subclass it and override the `protected` hooks to change how a request is read
 * (`getKey`, `getScope`, `getFingerprint`), what a replay sends (`replay`), or how error bodies
 * look (`createProblem`).
 *
 * @publicApi
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  protected readonly logger = new Logger('Idempotency');
  private readonly routes: RouteStates;
  private readonly bodyReader: FingerprintBodyReader;
  /** What a claimed request needs from this interceptor; `createProblem` goes through a subclass's override. */
  private readonly claimedRequestDeps: ClaimedRequestDeps;

  constructor(
    protected readonly reflector: Reflector,
    protected readonly engine: IdempotencyService,
    @Inject(IDEMPOTENCY_SETTINGS) protected readonly settings: ResolvedModuleSettings,
  ) {
    this.routes = new RouteStates(reflector, settings);
    this.bodyReader = new FingerprintBodyReader(this.logger);
    this.claimedRequestDeps = {
      engine,
      logger: this.logger,
      createProblem: (kind, options) => this.createProblem(kind, options),
    };
  }

  async intercept(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    if (context.getType() !== 'http') return next.handle();
    const route = this.routes.of(context);
    const request = context.switchToHttp().getRequest<HttpRequest>();
    if (!route || !route.policy.methodSet.has(request.method.toUpperCase())) return next.handle();
    // Bound twice on the route: the interceptor already handling the request decides; see enterRequest().
    let entry = enterRequest(request);
    // The handling mark of an attempt that an outer `timeout()` dropped stays until it ends: a
    // subscription again from outside its handler is a re-entry (it gets that attempt's outcome),
    // never a pass-through that would run the handler beside it.
    if (entry === 'nested' && resubscribedWhileClaimed(request)) entry = 'outside';
    // Subscribed again while the first subscription still decides (an outer `timeout()` fired
    // before the claim was made): no handler of this request runs yet, so this is no interceptor
    // bound twice; passing it through would run the handler unprotected beside the claim.
    if (entry === 'nested' && deciding.has(request)) {
      throw this.createProblem('idempotency-request-in-progress', { retryAfterSeconds: 1 });
    }
    if (entry === 'nested') return next.handle();
    if (entry === 'outside') return runForRequest(request, context, () => this.intercept(context, next));
    deciding.add(request);
    try {
      return await this.claimAndRun(context, next, route, request);
    } finally {
      deciding.delete(request);
    }
  }

  /** The key, the scope and the fingerprint, the claim, and what it answers (its handler run, a replay, a refusal). */
  private async claimAndRun(
    context: ExecutionContext,
    next: CallHandler,
    route: RouteState,
    request: HttpRequest,
  ): Promise<Observable<unknown>> {
    const { policy } = route;

    const parsed = this.getKey(request, policy);
    if (parsed.kind === 'missing') {
      if (policy.required) throw this.createProblem('idempotency-key-missing');
      return next.handle();
    }
    if (parsed.kind === 'invalid') {
      throw this.createProblem('idempotency-key-invalid', { extensions: { reason: parsed.reason } });
    }
    const echo = policy.echoKey ? receivedKey(request) : undefined;
    if (bodyBytesOf(request) > policy.maxFingerprintedBodyBytes) {
      throw this.createProblem('idempotency-request-too-large', {
        echo,
        extensions: { maxBytes: policy.maxFingerprintedBodyBytes },
      });
    }
    // An outer `retry()` subscribing to this request again gets its first attempt's outcome.
    const reentered = reenteredAttempt(request);
    const again = reentered && (await reentered);
    if (again) return again;
    const scope = await this.getScope(request, policy, parsed.key);
    const fingerprint = await this.getFingerprint(request, policy, scope);

    let begun;
    try {
      begun = await this.engine.begin({
        scoped: scope.scoped,
        fingerprint,
        policy,
        labels: { operation: scope.operation, tenant: scope.tenant },
      });
    } catch (error) {
      if (error instanceof IdempotencyRecordUnreadableError)
        throw this.createProblem('idempotency-record-unreadable', { echo });
      if (!(error instanceof IdempotencyStoreError)) throw error;
      // The engine has logged the store error; fail-open is one more event worth a line.
      if (policy.onStoreError === 'fail-open') {
        this.engine.telemetry.failOpen(scope.scoped);
        return next.handle();
      }
      throw this.createProblem('idempotency-store-unavailable', { echo, retryAfterSeconds: 1 });
    }

    switch (begun.kind) {
      case 'claimed':
        if (responseAnswered(context.switchToHttp().getResponse<HttpResponse>())) {
          // An outer layer answered, or the client left, while the claim was being made: the
          // handler must not run for an answer already given (docs/contract.md B.7 rule 17a).
          await this.engine.abandon(begun.claim).catch(() => undefined);
          return of(undefined);
        }
        // Decided: from here the handler may run, and an interceptor bound twice inside it passes through.
        deciding.delete(request);
        try {
          return runClaimedRequest(context, next, begun.claim, route, echo, this.claimedRequestDeps);
        } catch (error) {
          // Nothing ran: the claim, and on a transactional route its open transaction (a pooled
          // connection), must not outlive the request.
          await this.engine.abandon(begun.claim).catch(() => undefined);
          throw error;
        }
      case 'replay':
        return this.answer(context, begun.response, route, echo, true);
      case 'outcome-unknown':
        return this.answer(context, begun.response, route, echo, false);
      case 'mismatch':
        throw this.createProblem('idempotency-key-reused', { echo, status: policy.mismatchStatus });
      case 'in-progress':
        throw this.createProblem('idempotency-request-in-progress', {
          echo,
          retryAfterSeconds: begun.retryAfterSeconds,
        });
      case 'replay-unavailable':
        throw this.createProblem('idempotency-replay-unavailable', {
          echo,
          extensions: { operationCompleted: true },
          headers: pickHeaders(begun.response.headers, ['location', 'content-location']),
        });
    }
  }

  /**
   * Parses the `Idempotency-Key` field (docs/contract.md B.2). Override it to read the key from
   * somewhere else; return `{ kind: 'missing' }` for a request without one.
   *
   * @example
   * // Also accept the key from a legacy `X-Request-Key` header.
   * protected getKey(request: IdempotencyHttpRequest, policy: ResolvedPolicy): ParsedKey {
   *   const { headers } = request;
   *   return super.getKey({ ...request, headers: { ...headers, 'idempotency-key': headers['idempotency-key'] ?? headers['x-request-key'] } }, policy);
   * }
   */
  protected getKey(request: HttpRequest, policy: ResolvedPolicy): ParsedKey {
    return parseIdempotencyKey(request.headers['idempotency-key'], policy);
  }

  /**
   * Resolves tenant, principal and operation into the scoped key (docs/contract.md B.3). A dimension in
   * the scope that resolves to nothing falls back to `anonymousScope`, or fails with 500: never a
   * silent global namespace (rule 13). Override it to scope keys another way.
   *
   * @example
   * // Keys belong to a signed-in user: refuse them before anything is claimed.
   * protected async getScope(request: IdempotencyHttpRequest, policy: ResolvedPolicy, key: string): Promise<ResolvedScope> {
   *   if (!request.user) throw new UnauthorizedException();
   *   return super.getScope(request, policy, key);
   * }
   */
  protected async getScope(request: HttpRequest, policy: ResolvedPolicy, key: string): Promise<ResolvedScope> {
    return resolveScope(request, policy, key, this.settings, (dimension, operation) => {
      this.logger.error(
        `cannot resolve the ${dimension} of ${operation}: configure IdempotencyModule's \`${dimension}\` resolver or \`anonymousScope\`, or leave '${dimension}' out of the route's scope`,
      );
      return this.createProblem('idempotency-scope-unresolved');
    });
  }

  /**
   * The request fingerprint (docs/contract.md B.4), or the route's custom function (rule 16).
   * Override it to compare retries by something else; keep `scope.fingerprintExtras` in it, or
   * a retry from another tenant or principal could replay this answer (rule 12a).
   *
   * @example
   * // A retry under another API version is another request, even with the same payload.
   * protected async getFingerprint(request: IdempotencyHttpRequest, policy: ResolvedPolicy, scope: ResolvedScope): Promise<string> {
   *   const base = await super.getFingerprint(request, policy, scope);
   *   return createHash('sha256').update(base).update(String(request.headers['api-version'])).digest('base64url');
   * }
   */
  protected async getFingerprint(request: HttpRequest, policy: ResolvedPolicy, scope: ResolvedScope): Promise<string> {
    const option = policy.fingerprint;
    if (typeof option === 'function') return customFingerprint(option, request, scope);
    const body = await this.bodyReader.read(request, policy, scope.operation, () => {
      const echo = policy.echoKey ? receivedKey(request) : undefined;
      return this.createProblem('idempotency-request-too-large', {
        echo,
        extensions: { maxBytes: policy.maxFingerprintedBodyBytes },
      });
    });
    return computeFingerprint(fingerprintInputOf(request, option, scope, body));
  }

  /**
   * Builds the replayed response: original status, stored headers and body bytes, plus a fresh
   * `Date`, the key echo and the replay marker (docs/contract.md B.6, B.8). Override it to change what a
   * replay sends; by default the stored bytes are written without building a `Response`.
   *
   * @example
   * // Replays must never be cached by a proxy.
   * protected replay(stored: StoredResponse, policy: ResolvedPolicy, echo: string | undefined, replayed: boolean): Response {
   *   const response = super.replay(stored, policy, echo, replayed);
   *   response.headers.set('cache-control', 'no-store');
   *   return response;
   * }
   */
  protected replay(
    stored: StoredResponse,
    policy: ResolvedPolicy,
    echo: string | undefined,
    replayed: boolean,
  ): Response {
    const body = stored.body ?? Buffer.alloc(0);
    const headers = [...replayedHeaders(stored, policy, echo, replayed)];
    return new Response(hasNullBody(stored.statusCode) || body.length === 0 ? null : body, {
      status: stored.statusCode,
      headers,
    });
  }

  /**
   * Builds every problem the interceptor answers with (docs/contract.md B.11): an
   * `IdempotencyProblemException` whose `problem` is the RFC 9457 body and whose `headers` the
   * response carries (`Retry-After`, the key echo, `Content-Language`, `Link`). Override it to
   * shape error bodies; keep the status and the headers, clients act on them.
   *
   * @example
   * // Every problem body carries the request's trace id.
   * protected createProblem(kind: IdempotencyProblemKind, options?: ProblemOptions): IdempotencyProblemException {
   *   const exception = super.createProblem(kind, options);
   *   return new IdempotencyProblemException({ ...exception.problem, traceId: currentTraceId() }, exception.headers);
   * }
   */
  protected createProblem(kind: IdempotencyProblemKind, options: ProblemOptions = {}): IdempotencyProblemException {
    return createProblemException(kind, this.settings, options);
  }

  /**
   * Sends a stored answer by writing it to the response directly, from the stored bytes unless a
   * subclass overrides `replay()`, on every route (with `@Res()` or not): returning a Web
   * `Response` for Nest to send would stream its body, which costs more than the rest of a
   * replay. Nest then finds the response sent and adds nothing to it: it sets a route's status
   * before the handler, and sends an `undefined` result as nothing (tested on Express and Fastify,
   * with and without `@Res()`).
   */
  private async answer(
    context: ExecutionContext,
    stored: StoredResponse,
    { policy }: RouteState,
    echo: string | undefined,
    replayed: boolean,
  ): Promise<Observable<unknown>> {
    let status = stored.statusCode;
    let headers: Iterable<[string, string]>;
    let body: Buffer;
    if (this.replay === IdempotencyInterceptor.prototype.replay) {
      headers = replayedHeaders(stored, policy, echo, replayed);
      body = hasNullBody(status) ? Buffer.alloc(0) : (stored.body ?? Buffer.alloc(0));
    } else {
      const replay = this.replay(stored, policy, echo, replayed);
      status = replay.status;
      headers = replay.headers;
      body = Buffer.from(await replay.arrayBuffer());
    }
    writeAnswer(context.switchToHttp().getResponse<HttpResponse>(), status, headers, body);
    return of(undefined);
  }
}
