import { RESPONSE_PASSTHROUGH_METADATA, ROUTE_ARGS_METADATA } from '@nestjs/common/constants.js';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum.js';
import {
  Inject,
  Injectable,
  Logger,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { createHash } from 'node:crypto';
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { from, lastValueFrom, of, type Observable } from 'rxjs';
import { IDEMPOTENCY_CONTEXT } from '../decorators/idempotency-context.decorator.js';
import { computeFingerprint, type ParsedRequestBody } from '../engine/fingerprint.js';
import { IdempotencyContextRef } from '../engine/idempotency-context.js';
import { parseIdempotencyKey, type ParsedKey } from '../engine/idempotency-key.parser.js';
import {
  IdempotencyService,
  type ExecutionResult,
  type HandlerOutcome,
  type IdempotencyClaim,
} from '../engine/idempotency.service.js';
import { replayableHeaders } from '../engine/replayable-headers.js';
import { buildScopedKey, type ScopedKey } from '../engine/scoped-key.js';
import {
  buildProblem,
  IdempotencyProblemException,
  type IdempotencyProblemKind,
} from '../errors/idempotency.exceptions.js';
import { forcedOutcomeOf } from '../errors/idempotency-outcome.errors.js';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import { IdempotencyRecordUnreadableError } from '../errors/idempotency-record-unreadable.error.js';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import { readVisibleBody, RequestBodyNotVisibleError, type BodyCarrier, type VisibleBody } from '../http/request-body.js';
import { UnreadBodyTooLargeError } from '../http/unread-body.js';
import { UploadedFileNotVisibleError } from '../http/uploaded-files.js';
import type { OutcomeOverride } from '../engine/outcome-policy.js';
import { IDEMPOTENCY_KEY_HEADER, PROBLEM_CONTENT_TYPE } from '../idempotency.constants.js';
import { IdempotencyOutcomeRoute, IdempotentRoute } from '../idempotency.metadata.js';
import { resolvePolicy, type ResolvedModuleSettings, type ResolvedPolicy } from '../idempotency.options.js';
import { IDEMPOTENCY_SETTINGS } from '../idempotency.tokens.js';
import type { IdempotencyHttpRequest, IdempotentOptions } from '../interfaces/idempotency-module-options.interface.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import { isHeadersSentError, renderHandlerOutcome, statusOfOutcome, type RouteResponseState } from './handler-response.js';
import { HandlerSettlement } from './handler-settlement.js';
import { ResponseCapture, type CapturedResponse, type ReplacementResponse } from './response-capture.js';

/** The request as Express and Fastify hand it over; only what the adapter reads. */
type HttpRequest = IdempotencyHttpRequest & {
  url?: string;
  originalUrl?: string;
  params?: Record<string, string>;
  body?: unknown;
  rawBody?: Buffer;
  route?: { path?: unknown };
  baseUrl?: string;
  routeOptions?: { url?: string };
  raw?: { url?: string };
};

/** The response as Express (a `ServerResponse`) or Fastify (a reply around one) hands it over. */
type HttpResponse = { raw?: ServerResponse } & Partial<ServerResponse>;

/** What every request of one route shares, resolved on its first request. */
interface RouteState {
  policy: ResolvedPolicy;
  /** `@IdempotencyOutcome()` on the route or its controller. */
  outcome: OutcomeOverride | undefined;
  /** Headers the interceptor sets itself: never stored (the key echo, the replay marker). */
  ownHeaders: ReadonlySet<string>;
  /** The handler takes the response (`@Res()`, `@Next()`) and may write it itself. */
  handlerWrites: boolean;
}

/**
 * How long the record waits, once the handler settled, for the route to write its rendering of
 * the outcome (an exception filter's body, an outer interceptor's envelope). Nest writes at
 * once; only an outer layer that awaits something after the handler delays it. Past this, the
 * record is rendered from the handler's result itself.
 */
const WRITE_AFTER_SETTLEMENT_GRACE_MS = 1000;

/** Who the key belongs to, and what of the request goes into the fingerprint besides its content. */
export interface ResolvedScope {
  scoped: ScopedKey;
  operation: string;
  /** The resolved tenant, if any: for logs and spans. */
  tenant?: string;
  /** Dimensions left out of the identity, compared through the fingerprint (docs/contract.md B.3 rule 12). */
  fingerprintExtras: Record<string, string>;
}

/**
 * The HTTP adapter of the engine (docs/contract.md B.1–B.11): reads the key, resolves the scope,
 * fingerprints the request, then replays, rejects, or runs the handler once and stores what it
 * answered. Subclass it and override the `protected` hooks to change how a request is read.
 *
 * @publicApi
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  protected readonly logger = new Logger('Idempotency');
  private readonly routes = new WeakMap<object, WeakMap<object, RouteState | null>>();
  private warnedNoRawBody = false;

  constructor(
    protected readonly reflector: Reflector,
    protected readonly engine: IdempotencyService,
    @Inject(IDEMPOTENCY_SETTINGS) protected readonly settings: ResolvedModuleSettings,
  ) {}

  async intercept(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    if (context.getType() !== 'http') return next.handle();
    const route = this.routeOf(context);
    const request = context.switchToHttp().getRequest<HttpRequest>();
    if (!route || !route.policy.methodSet.has(request.method.toUpperCase())) return next.handle();
    const { policy } = route;

    const parsed = this.getKey(request, policy);
    if (parsed.kind === 'missing') {
      if (policy.required) throw this.problem('idempotency-key-missing');
      return next.handle();
    }
    if (parsed.kind === 'invalid') {
      throw this.problem('idempotency-key-invalid', { extensions: { reason: parsed.reason } });
    }
    const echo = policy.echoKey ? this.receivedKey(request) : undefined;
    if (bodyBytesOf(request) > policy.maxFingerprintedBodyBytes) {
      throw this.problem('idempotency-request-too-large', { echo, extensions: { maxBytes: policy.maxFingerprintedBodyBytes } });
    }
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
      if (error instanceof IdempotencyRecordUnreadableError) throw this.problem('idempotency-record-unreadable', { echo });
      if (!(error instanceof IdempotencyStoreError)) throw error;
      // The engine has logged the store error; fail-open is one more event worth a line.
      if (policy.onStoreError === 'fail-open') {
        this.engine.telemetry.failOpen(scope.scoped);
        return next.handle();
      }
      throw this.problem('idempotency-store-unavailable', { echo, retryAfterSeconds: 1 });
    }

    switch (begun.kind) {
      case 'claimed':
        return this.run(context, next, begun.claim, route, echo);
      case 'replay':
        return this.answer(context, begun.response, route, echo, true);
      case 'outcome-unknown':
        return this.answer(context, begun.response, route, echo, false);
      case 'mismatch':
        throw this.problem('idempotency-key-reused', { echo, status: policy.mismatchStatus });
      case 'in-progress':
        throw this.problem('idempotency-request-in-progress', { echo, retryAfterSeconds: begun.retryAfterSeconds });
      case 'replay-unavailable':
        throw this.problem('idempotency-replay-unavailable', {
          echo,
          extensions: { operationCompleted: true },
          headers: pickHeaders(begun.response.headers, ['location', 'content-location']),
        });
    }
  }

  /** Parses the `Idempotency-Key` field (docs/contract.md B.2). */
  protected getKey(request: HttpRequest, policy: ResolvedPolicy): ParsedKey {
    return parseIdempotencyKey(request.headers['idempotency-key'], policy);
  }

  /**
   * Resolves tenant, principal and operation into the scoped key (docs/contract.md B.3). A dimension in
   * the scope that resolves to nothing falls back to `anonymousScope`, or fails with 500: never a
   * silent global namespace (rule 13).
   */
  protected async getScope(request: HttpRequest, policy: ResolvedPolicy, key: string): Promise<ResolvedScope> {
    const operation = policy.operation ?? `${request.method.toUpperCase()} ${routeTemplateOf(request)}`;
    const inScope = new Set(policy.scope);
    const anonymous: ('tenant' | 'principal')[] = [];
    const resolve = async (dimension: 'tenant' | 'principal'): Promise<string | undefined> => {
      const resolver = this.settings[dimension];
      const value = resolver ? await resolver(request) : undefined;
      if (value !== undefined && value !== '') return value;
      if (!inScope.has(dimension)) return undefined;
      const bucket = this.settings.anonymousScope ? await this.settings.anonymousScope(request) : undefined;
      if (bucket !== undefined && bucket !== '') {
        anonymous.push(dimension);
        return bucket;
      }
      this.logger.error(
        `cannot resolve the ${dimension} of ${operation}: configure IdempotencyModule's \`${dimension}\` resolver or \`anonymousScope\`, or leave '${dimension}' out of the route's scope`,
      );
      throw this.problem('idempotency-scope-unresolved');
    };
    const tenant = await resolve('tenant');
    const principal = await resolve('principal');
    const fingerprintExtras: Record<string, string> = {};
    // Every dimension resolved but left out of the identity is compared like the payload (rule 12a).
    if (!inScope.has('tenant') && tenant !== undefined) fingerprintExtras.tenant = tenant;
    if (!inScope.has('principal')) fingerprintExtras.principal = principal ?? '';
    if (!inScope.has('operation')) fingerprintExtras.operation = operation;
    return {
      scoped: buildScopedKey({ operation, tenant, principal, key, anonymous }, policy.scope),
      operation,
      tenant,
      fingerprintExtras,
    };
  }

  /** The request fingerprint (docs/contract.md B.4), or the route's custom function (rule 16). */
  protected async getFingerprint(request: HttpRequest, policy: ResolvedPolicy, scope: ResolvedScope): Promise<string> {
    const option = policy.fingerprint;
    if (typeof option === 'function') {
      return createHash('sha256')
        .update(JSON.stringify(scope.fingerprintExtras))
        .update('\n')
        .update(option(request))
        .digest('base64url');
    }
    const url = request.originalUrl ?? request.raw?.url ?? request.url ?? '';
    const queryAt = url.indexOf('?');
    const contentType = firstHeader(request.headers['content-type']);
    const body = await this.rawBodyOf(request, policy, scope.operation);
    return computeFingerprint({
      method: request.method.toUpperCase(),
      routeTemplate: routeTemplateOf(request),
      pathParams: { ...request.params },
      query: queryAt < 0 ? '' : url.slice(queryAt + 1),
      contentType,
      body: body.bytes,
      parsedBody: body.parsed,
      headers: (option.headers ?? []).map((name) => [name, (firstHeader(request.headers[name]) ?? '')] as [string, string]),
      extra: scope.fingerprintExtras,
      json: option.json,
    });
  }

  /**
   * Builds the replayed response: original status, stored headers and body bytes, plus a fresh
   * `Date`, the key echo and the replay marker (docs/contract.md B.6, B.8). Override it to change what a
   * replay sends; by default the stored bytes are written without building a `Response`.
   */
  protected replay(stored: StoredResponse, policy: ResolvedPolicy, echo: string | undefined, replayed: boolean): Response {
    const body = stored.body ?? Buffer.alloc(0);
    const headers = [...replayedHeaders(stored, policy, echo, replayed)];
    return new Response(hasNullBody(stored.statusCode) || body.length === 0 ? null : body, { status: stored.statusCode, headers });
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
    const response = context.switchToHttp().getResponse<HttpResponse & { code?: (s: number) => unknown; send?: (b: unknown) => unknown }>();
    if (response.raw && response.code && response.send) {
      response.code(status);
      for (const [name, value] of headers) setHeader(response, name, value);
      response.send(body);
    } else {
      const raw = response as ServerResponse;
      raw.statusCode = status;
      for (const [name, value] of headers) raw.setHeader(name, value);
      raw.end(body);
    }
    return of(undefined);
  }

  private run(
    context: ExecutionContext,
    next: CallHandler,
    claim: IdempotencyClaim,
    { policy, outcome: routeOutcome, ownHeaders, handlerWrites }: RouteState,
    echo: string | undefined,
  ): Observable<unknown> {
    const http = context.switchToHttp();
    const request = http.getRequest<HttpRequest>();
    const response = http.getResponse<HttpResponse>();
    const raw = (response.raw ?? response) as ServerResponse;
    const idem = new IdempotencyContextRef(claim);
    (request as Record<symbol, unknown>)[IDEMPOTENCY_CONTEXT] = idem;
    if (echo !== undefined) setHeader(response, IDEMPOTENCY_KEY_HEADER, echo);
    if (policy.replayHeader.onFresh) setHeader(response, policy.replayHeader.name, replayMarker(policy, false));

    const settlement = new HandlerSettlement(handlerWrites);
    // What the route set before the handler ran: the fallback when an outer layer overwrites it.
    const routeAtStart = routeResponseState(response, raw);
    let routeAtSettlement = routeAtStart;
    const handled = deferred<HandlerOutcome>();
    const executed = deferred<ExecutionResult>();

    // Installed before the handler starts: a handler may write its response synchronously.
    // A transactional response must not leave before its commit, however large it is.
    const holdBytes = policy.transactional ? Number.POSITIVE_INFINITY : policy.maxStoredResponseBytes;
    new ResponseCapture(raw, holdBytes, async (captured) => {
      // Classified synchronously: the handler's flow is only visible from the writer's own call.
      // An outer layer's answer before the handler settled is not the record: it leaves at once.
      if (settlement.written(captured) === 'early') return undefined;
      const result = await executed.promise;
      return result.kind === 'replaced' ? this.replacementFor(result, echo) : undefined;
    });
    // The client may have gone while the claim was being made: 'close' has fired already.
    if (raw.destroyed || raw.socket?.destroyed) settlement.close();
    else raw.once('close', () => settlement.close());

    const recordOf = async (outcome: HandlerOutcome): Promise<StoredResponse> => {
      const own = settlement.handlerResponse;
      if (own) return this.toStored(own, ownHeaders);
      if (settlement.answeredEarly && handlerWrites && (outcome.ok || isHeadersSentError(outcome.error))) {
        // A `@Res()` handler whose response an outer layer pre-empted: what it did stands, but
        // there are no bytes of its own to replay (docs/contract.md B.7 rule 17a, last case).
        return this.toStored({ ...renderHandlerOutcome({ ok: true, value: undefined }, routeAtStart), bodyOmitted: true }, ownHeaders);
      }
      const written = await settlement.writeAfterSettlement(WRITE_AFTER_SETTLEMENT_GRACE_MS);
      const status = statusOfOutcome(outcome, routeAtSettlement);
      if (written && (status === undefined || written.statusCode === status)) return this.toStored(written, ownHeaders);
      return this.toStored(renderHandlerOutcome(outcome, routeAtSettlement), ownHeaders);
    };

    void this.engine
      .execute(claim, {
        run: async (manager) => {
          idem.attachManager(manager);
          // Subscribed here, not by Nest: a client that disconnects makes Nest drop its
          // subscription, and the handler's result must still settle the claim.
          const outcome = await settlement
            .runHandler(() => lastValueFrom(next.handle(), { defaultValue: undefined }))
            .then(
              (value): HandlerOutcome => ({ ok: true, value }),
              (error: unknown): HandlerOutcome => ({ ok: false, error }),
            );
          routeAtSettlement = settlement.answeredEarly
            ? // The outer answer set its own status and representation: keep the handler's other headers (Location).
              { ...routeResponseState(response, raw, true), statusCode: routeAtStart.statusCode }
            : routeResponseState(response, raw);
          settlement.settle(outcome);
          handled.resolve(outcome);
          return outcome;
        },
        response: async (ran) => {
          // A `@Res()` handler's own response stands as soon as it is written (it may wait for
          // it to be sent); a transactional one still waits for the handler, to commit with it.
          const first = await Promise.race([
            ran.then((outcome) => ({ outcome, own: undefined })),
            settlement.handlerWrote().then((own) => ({ outcome: undefined, own })),
          ]);
          if (first.own && !policy.transactional) return this.toStored(first.own, ownHeaders);
          return recordOf(first.outcome ?? (await ran));
        },
        // Read once the handler settled, so a thrown error's forced outcome counts.
        override: (settled) => idem.outcome ?? (settled && !settled.ok ? forcedOutcomeOf(settled.error) : undefined) ?? routeOutcome,
      })
      .then((result) => {
        executed.resolve(result);
        if (result.kind === 'not-run') {
          const kind = result.reason === 'lost' ? 'idempotency-request-in-progress' : 'idempotency-store-unavailable';
          handled.resolve({ ok: false, error: this.problem(kind, { echo, retryAfterSeconds: result.retryAfterSeconds }) });
        }
      })
      .catch((error: unknown) => {
        // The engine freed the claim; whatever was written must still reach the client.
        this.logger.error(`the outcome of a request could not be recorded: ${String(error)}`);
        executed.resolve({ kind: 'sent' });
        handled.resolve({ ok: false, error });
      });
    return from(
      handled.promise.then((outcome) => {
        if (outcome.ok) return outcome.value;
        throw outcome.error;
      }),
    );
  }

  /** What a response whose transaction did not commit is replaced with: a retryable problem. */
  private replacementFor(
    result: { reason: 'lost' | 'store-unavailable'; retryAfterSeconds: number },
    echo: string | undefined,
  ): ReplacementResponse {
    const kind = result.reason === 'lost' ? 'idempotency-request-in-progress' : 'idempotency-store-unavailable';
    const exception = this.problem(kind, { echo, retryAfterSeconds: result.retryAfterSeconds });
    return {
      statusCode: exception.getStatus(),
      headers: { ...exception.headers, 'Content-Type': PROBLEM_CONTENT_TYPE },
      body: Buffer.from(JSON.stringify(exception.problem)),
    };
  }

  private toStored(captured: CapturedResponse, ownHeaders: ReadonlySet<string>): StoredResponse {
    const headers = replayableHeaders(captured.headers, ownHeaders);
    // Bytes compressed for this client (a Fastify onSend hook) are no body to replay to another (B.8 rule 21).
    const encoded = headers['content-encoding'] !== undefined && headers['content-encoding'] !== 'identity';
    return captured.bodyOmitted || encoded
      ? { statusCode: captured.statusCode, headers, bodyOmitted: true }
      : { statusCode: captured.statusCode, headers, body: captured.body };
  }

  /**
   * What the fingerprint sees of the body (docs/contract.md B.4 rule 15): the raw bytes where they can
   * be had (kept by the platform, or read here before any other layer and put back), else what
   * an upload interceptor or the platform parsed. A body it cannot see fails the request with a
   * configuration error instead of being fingerprinted in part.
   */
  private async rawBodyOf(
    request: HttpRequest,
    policy: ResolvedPolicy,
    operation: string,
  ): Promise<{ bytes?: Buffer; parsed?: ParsedRequestBody }> {
    let visible: VisibleBody;
    try {
      visible = await readVisibleBody(request as unknown as BodyCarrier, policy.maxFingerprintedBodyBytes);
    } catch (error) {
      if (error instanceof UnreadBodyTooLargeError) {
        const echo = policy.echoKey ? this.receivedKey(request) : undefined;
        throw this.problem('idempotency-request-too-large', { echo, extensions: { maxBytes: policy.maxFingerprintedBodyBytes } });
      }
      if (!(error instanceof RequestBodyNotVisibleError || error instanceof UploadedFileNotVisibleError)) throw error;
      const message =
        `@Idempotent() ${operation}: the request body cannot be fingerprinted: ${error.message}. ` +
        'Let the idempotency interceptor read the body first (write @Idempotent() below that layer\'s @UseInterceptors()), ' +
        'create the app with NestFactory.create(AppModule, { rawBody: true }), store uploads in memory or on disk, ' +
        'or give the route a fingerprint function.';
      this.logger.error(message);
      throw new IdempotencyConfigurationError(message);
    }
    if (visible.source === 'parsed' && !this.warnedNoRawBody) {
      this.warnedNoRawBody = true;
      this.logger.warn(
        'request.rawBody is missing: fingerprints fall back to the parsed body, which loses number spelling (1 vs 1.0). Create the app with NestFactory.create(AppModule, { rawBody: true }).',
      );
    }
    return { bytes: visible.bytes, parsed: visible.parsed };
  }

  private routeOf(context: ExecutionContext): RouteState | null {
    const handler = context.getHandler();
    const controller = context.getClass();
    let byHandler = this.routes.get(controller);
    if (!byHandler) this.routes.set(controller, (byHandler = new WeakMap()));
    let state = byHandler.get(handler);
    if (state === undefined) {
      const options: IdempotentOptions | undefined = this.reflector.getAllAndOverride(IdempotentRoute, [handler, controller]);
      state = options ? this.routeStateOf(context, resolvePolicy(this.settings.policyOptions, options)) : null;
      byHandler.set(handler, state);
    }
    return state;
  }

  private routeStateOf(context: ExecutionContext, policy: ResolvedPolicy): RouteState {
    return {
      policy,
      outcome: this.reflector.getAllAndOverride(IdempotencyOutcomeRoute, [context.getHandler(), context.getClass()]),
      ownHeaders: new Set([IDEMPOTENCY_KEY_HEADER.toLowerCase(), policy.replayHeader.name.toLowerCase()]),
      handlerWrites: takesResponse(context),
    };
  }

  /** The received field value, verbatim, for the echo (docs/contract.md B.6). */
  private receivedKey(request: HttpRequest): string {
    const value = request.headers['idempotency-key'];
    return Array.isArray(value) ? value.join(', ') : (value ?? '');
  }

  private problem(
    kind: IdempotencyProblemKind,
    options: {
      echo?: string;
      status?: number;
      retryAfterSeconds?: number;
      extensions?: Record<string, unknown>;
      headers?: Record<string, string>;
    } = {},
  ): IdempotencyProblemException {
    const { problemTypeBaseUri, problemLanguage, docsUrl } = this.settings;
    const headers: Record<string, string> = {
      'Content-Language': problemLanguage,
      'Cache-Control': 'no-store',
      ...options.headers,
    };
    if (docsUrl) headers.Link = `<${docsUrl}>; rel="describedby"; type="text/html"`;
    if (options.retryAfterSeconds !== undefined) headers['Retry-After'] = String(options.retryAfterSeconds);
    if (options.echo !== undefined) headers[IDEMPOTENCY_KEY_HEADER] = options.echo;
    return new IdempotencyProblemException(
      buildProblem(kind, problemTypeBaseUri, { status: options.status, extensions: options.extensions }),
      headers,
    );
  }
}

function hasNullBody(status: number): boolean {
  return status === 204 || status === 205 || status === 304;
}

/**
 * The headers of a replay (docs/contract.md B.6, B.8), names lower-cased and repeated values joined as a
 * Web `Headers` joins them: the stored ones, a fresh `Content-Length`, the key echo and the
 * replay marker.
 */
function replayedHeaders(stored: StoredResponse, policy: ResolvedPolicy, echo: string | undefined, replayed: boolean): Map<string, string> {
  const headers = new Map<string, string>();
  for (const [name, value] of Object.entries(stored.headers)) {
    const values = Array.isArray(value) ? value : [value];
    if (values.length > 0) headers.set(name.toLowerCase(), values.join(', '));
  }
  if (!hasNullBody(stored.statusCode)) headers.set('content-length', String(stored.body?.length ?? 0));
  if (echo !== undefined) headers.set(IDEMPOTENCY_KEY_HEADER.toLowerCase(), echo);
  if (replayed || policy.replayHeader.onFresh) headers.set(policy.replayHeader.name.toLowerCase(), replayMarker(policy, replayed));
  return headers;
}

/**
 * True when the handler takes the response over (`@Res()` without passthrough, or `@Next()`): it
 * writes the answer itself. A passthrough handler returns its result for Nest to write.
 */
function takesResponse(context: ExecutionContext): boolean {
  const controller = context.getClass();
  const method = context.getHandler().name;
  const args: Record<string, unknown> | undefined = Reflect.getMetadata(ROUTE_ARGS_METADATA, controller, method);
  const passthrough = Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, controller, method) === true;
  return Object.keys(args ?? {}).some((key) => {
    const type = Number(key.split(':')[0]);
    return type === RouteParamtypes.NEXT || (type === RouteParamtypes.RESPONSE && !passthrough);
  });
}

/**
 * The status and headers the response carries now, for rendering the handler's outcome; without
 * the `Content-*` headers when another answer has been written over them.
 */
function routeResponseState(response: HttpResponse, raw: ServerResponse, withoutRepresentation = false): RouteResponseState {
  const reply = response as { getHeaders?: () => OutgoingHttpHeaders };
  let headers: OutgoingHttpHeaders = { ...raw.getHeaders(), ...(response.raw ? reply.getHeaders?.() : undefined) };
  if (withoutRepresentation) headers = Object.fromEntries(Object.entries(headers).filter(([name]) => !/^content-/i.test(name)));
  return { statusCode: raw.statusCode, headers, platform: response.raw ? 'fastify' : 'express' };
}

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

function replayMarker(policy: ResolvedPolicy, replayed: boolean): string {
  if (policy.replayHeader.format === 'sf-boolean') return replayed ? '?1' : '?0';
  return replayed ? 'true' : 'false';
}

/** `POST /orders/:id`-style template: Express keeps it on `req.route`, Fastify on `routeOptions`. */
function routeTemplateOf(request: HttpRequest): string {
  if (request.routeOptions?.url) return request.routeOptions.url;
  const path = request.route?.path;
  if (typeof path === 'string') return `${request.baseUrl ?? ''}${path}`;
  const url = request.originalUrl ?? request.url ?? '';
  const queryAt = url.indexOf('?');
  return queryAt < 0 ? url : url.slice(0, queryAt);
}

/** Size of the body to fingerprint: the raw bytes when kept, else what `Content-Length` announced. */
function bodyBytesOf(request: HttpRequest): number {
  if (Buffer.isBuffer(request.rawBody)) return request.rawBody.length;
  const declared = Number(firstHeader(request.headers['content-length']));
  return Number.isFinite(declared) ? declared : 0;
}

function firstHeader(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value;
}

function setHeader(response: HttpResponse, name: string, value: string): void {
  const reply = response as { header?: (n: string, v: string) => unknown };
  if (typeof reply.header === 'function' && response.raw) reply.header(name, value);
  else (response as ServerResponse).setHeader(name, value);
}

function pickHeaders(headers: Record<string, string | string[]>, names: string[]): Record<string, string> {
  const picked: Record<string, string> = {};
  for (const name of names) {
    const value = headers[name];
    if (value !== undefined) picked[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return picked;
}
