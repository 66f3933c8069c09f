/**
 * Running a claimed request: the handler runs once under the engine, its response is held back
 * until its record is stored, and the record follows what the handler itself did, whatever an
 * outer layer answers (docs/contract.md B.7 rule 17a).
 */
import type { CallHandler, ExecutionContext, Logger } from '@nestjs/common';
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { lastValueFrom, Observable, of, throwError } from 'rxjs';
import { IDEMPOTENCY_CONTEXT } from '../decorators/idempotency-context.decorator.js';
import type { IdempotencyClaim } from '../engine/idempotency-claim.js';
import { IdempotencyContextRef } from '../engine/idempotency-context.js';
import type { Execution, ExecutionResult, HandlerOutcome } from '../engine/idempotency-engine.types.js';
import type { IdempotencyService } from '../engine/idempotency.service.js';
import { decideOutcome, type OutcomeOverride } from '../engine/outcome-policy.js';
import { replayableHeaders } from './replayable-headers.js';
import { forcedOutcomeOf } from '../errors/idempotency-outcome.exceptions.js';
import type { IdempotencyProblemException, IdempotencyProblemKind } from '../errors/idempotency.exceptions.js';
import { IDEMPOTENCY_KEY_HEADER } from '../idempotency.constants.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import {
  isHeadersSentError,
  isRenderingOf,
  renderHandlerOutcome,
  type RouteResponseState,
} from './handler-response.js';
import { HandlerSettlement } from './handler-settlement.js';
import { setHeader, type HttpRequest, type HttpResponse } from './http-request.js';
import { notRunProblemKind, problemResponse, type ProblemOptions } from './problem-responses.js';
import { ResponseCapture, type CapturedResponse, type ReplacementResponse } from './response-capture.js';
import type { RouteState } from './route-state.js';
import { replayMarker } from './stored-answer.js';

/** What a claimed request needs from the interceptor that runs it. */
export interface ClaimedRequestDeps {
  engine: IdempotencyService;
  logger: Logger;
  /** Builds the problems it answers with (the interceptor's `createProblem()`). */
  createProblem: (kind: IdempotencyProblemKind, options?: ProblemOptions) => IdempotencyProblemException;
}

/**
 * Runs the handler of a claimed request once and records what it answered. The observable
 * settles with the handler's own outcome, or with a problem when the claim could not run.
 */
export function runClaimedRequest(
  context: ExecutionContext,
  next: CallHandler,
  claim: IdempotencyClaim,
  route: RouteState,
  echo: string | undefined,
  deps: ClaimedRequestDeps,
): Observable<unknown> {
  const http = context.switchToHttp();
  const request = http.getRequest<HttpRequest>();
  const claimed = new ClaimedRequest(request, http.getResponse<HttpResponse>(), next, claim, route, echo, deps);
  void claimed.execute();
  (request as AttemptCarrier)[ATTEMPT] = claimed;
  return claimed.handOut();
}

const succeeded = (value: unknown): HandlerOutcome => ({ ok: true, value });
const failed = (error: unknown): HandlerOutcome => ({ ok: false, error });

/**
 * One claimed request: the engine's {@link Execution} of it (its methods are called by the
 * engine) and the attempt an outer `retry()` finds again. State lives in fields, not in closures
 * made per request.
 */
class ClaimedRequest implements Execution, ClaimedAttempt {
  private readonly raw: ServerResponse;
  private readonly idem: IdempotencyContextRef;
  private readonly settlement: HandlerSettlement;
  /** What the route set before the handler ran: the fallback when an outer layer overwrites it. */
  private readonly routeAtStart: RouteResponseState;
  private routeAtSettlement: RouteResponseState;
  private readonly handled = deferred<HandlerOutcome>();
  private readonly executed = deferred<ExecutionResult>();
  /** What replaces the handler's own held answer when its transaction rolled back under it. */
  private replaceOwnAnswer: CapturedResponse | undefined;
  /** What the engine was given to decide the record with (for a re-entry of this request). */
  private recordedResponse: StoredResponse | undefined;
  private recordedOverride: OutcomeOverride | undefined;

  constructor(
    request: HttpRequest,
    private readonly httpResponse: HttpResponse,
    private readonly next: CallHandler,
    private readonly claim: IdempotencyClaim,
    private readonly route: RouteState,
    private readonly echo: string | undefined,
    private readonly deps: ClaimedRequestDeps,
  ) {
    const { policy } = route;
    const raw = (httpResponse.raw ?? httpResponse) as ServerResponse;
    this.raw = raw;
    this.idem = new IdempotencyContextRef(claim);
    (request as Record<symbol, unknown>)[IDEMPOTENCY_CONTEXT] = this.idem;
    if (echo !== undefined) setHeader(httpResponse, IDEMPOTENCY_KEY_HEADER, echo);
    if (policy.replayHeader.onFresh) setHeader(httpResponse, policy.replayHeader.name, replayMarker(policy, false));

    // Where Nest renders nothing of a success, the handler answers through the response itself.
    const settlement = new HandlerSettlement(route.handlerWrites && !route.passthrough);
    this.settlement = settlement;
    this.routeAtStart = routeResponseState(httpResponse, raw);
    this.routeAtSettlement = this.routeAtStart;

    // Installed before the handler starts: a handler may write its response synchronously.
    // A transactional response must not leave before its commit, however large it is.
    const holdBytes = policy.transactional ? Number.POSITIVE_INFINITY : policy.maxStoredResponseBytes;
    new ResponseCapture(raw, holdBytes, (captured) => this.released(captured));
    // The client may have gone while the claim was being made: 'close' has fired already.
    if (isGone(raw)) settlement.close();
    else raw.once('close', () => settlement.close());
  }

  /** The held response may go out once this resolves; a response it returns is sent instead. */
  private async released(captured: CapturedResponse): Promise<ReplacementResponse | undefined> {
    // Classified synchronously: the handler's flow is only visible from the writer's own call.
    // An outer layer's answer before the handler settled is not the record: it leaves at once.
    const origin = this.settlement.written(captured);
    if (origin === 'early') return undefined;
    const result = await this.executed.promise;
    if (result.kind === 'replaced') {
      return problemResponse(
        this.deps.createProblem(notRunProblemKind(result.reason), {
          echo: this.echo,
          retryAfterSeconds: result.retryAfterSeconds,
        }),
      );
    }
    return origin === 'handler' && this.replaceOwnAnswer ? asReplacement(this.replaceOwnAnswer) : undefined;
  }

  /** Runs the claim under the engine; never rejects. */
  async execute(): Promise<void> {
    const { settlement, executed, handled } = this;
    try {
      const result = await this.deps.engine.execute(this.claim, this);
      settlement.end();
      executed.resolve(result);
      if (result.kind === 'not-run') {
        const problem = this.deps.createProblem(notRunProblemKind(result.reason), {
          echo: this.echo,
          retryAfterSeconds: result.retryAfterSeconds,
        });
        handled.resolve({ ok: false, error: problem });
      }
    } catch (error) {
      // The engine freed the claim; whatever was written must still reach the client.
      this.deps.logger.error(`the outcome of a request could not be recorded: ${String(error)}`);
      settlement.end();
      executed.resolve({ kind: 'sent' });
      handled.resolve({ ok: false, error });
    }
  }

  /** {@link Execution.run}: the handler, once. */
  async run(manager: unknown): Promise<HandlerOutcome> {
    const { settlement, httpResponse, raw } = this;
    try {
      this.idem.attachManager(manager);
      // Subscribed here, not by Nest: a client that disconnects makes Nest drop its
      // subscription, and the handler's result must still settle the claim.
      const outcome = await settlement
        .runHandler(() => lastValueFrom(this.next.handle(), { defaultValue: undefined }))
        .then(succeeded, failed);
      this.routeAtSettlement = settlement.answeredEarly
        ? // The outer answer set its own status and representation: keep the handler's other headers (Location).
          { ...routeResponseState(httpResponse, raw, true), statusCode: this.routeAtStart.statusCode }
        : routeResponseState(httpResponse, raw);
      settlement.settle(outcome);
      this.handled.resolve(outcome);
      return outcome;
    } finally {
      // Wakes `response`, which waits for the handler's own write or the end of its run.
      settlement.handlerDone();
    }
  }

  /** {@link Execution.response}: what the record stores, once it is known. */
  async response(ran: Promise<HandlerOutcome>): Promise<StoredResponse | undefined> {
    const { policy, ownHeaders } = this.route;
    // A `@Res()` handler's own response stands as soon as it is written (it may wait for
    // it to be sent); a transactional one still waits for the handler, to commit with it.
    const own = await this.settlement.ownWriteBeforeSettlement();
    const stored = own && !policy.transactional ? toStored(own, ownHeaders) : await this.recordOf(await ran);
    this.recordedResponse = stored;
    return stored;
  }

  /** {@link Execution.override}: read once the handler settled, so a thrown error's forced outcome counts. */
  override(settled: HandlerOutcome | undefined): OutcomeOverride | undefined {
    const override =
      this.idem.outcome ?? (settled && !settled.ok ? forcedOutcomeOf(settled.error) : undefined) ?? this.route.outcome;
    this.recordedOverride = override;
    return override;
  }

  /** What the record stores, decided by events (docs/contract.md B.7 rule 17a); undefined releases it. */
  private async recordOf(outcome: HandlerOutcome): Promise<StoredResponse | undefined> {
    const { settlement, routeAtStart } = this;
    const { policy, ownHeaders, handlerWrites, passthrough, redirects } = this.route;
    const own = settlement.handlerResponse;
    if (own) return this.recordOfOwnAnswer(own, outcome);
    // A handler that writes its own answer fails last on that write, once its work is done; a
    // passthrough handler that hits a sent response was still at work (setting a header).
    const answersItself = outcome.ok ? outcome.value === undefined : !passthrough && isHeadersSentError(outcome.error);
    if (settlement.answeredEarly && handlerWrites && answersItself) {
      // A `@Res()` handler whose response an outer layer pre-empted: what it did stands, but
      // there are no bytes of its own to replay (docs/contract.md B.7 rule 17a, last case). A
      // passthrough handler that returned a value has it rendered below, as any other.
      return toStored(
        { ...renderHandlerOutcome({ ok: true, value: undefined }, routeAtStart), bodyOmitted: true },
        ownHeaders,
      );
    }
    if (handlerWrites && !passthrough && outcome.ok) {
      // Nest renders nothing: the handler's answer is its own write, however late it comes (a
      // callback, a client created at startup). None before `answerTimeoutMs`: no success is
      // recorded that nobody saw; the claim is released.
      const answer = await settlement.handlerAnswer(policy.answerTimeoutMs);
      if (answer) return toStored(answer, ownHeaders);
      if (settlement.answeredEarly) {
        // An outer layer answered while it was waiting: what the handler did stands, unreplayable.
        return toStored({ ...renderHandlerOutcome(outcome, routeAtStart), bodyOmitted: true }, ownHeaders);
      }
      this.deps.logger.warn(
        `a @Res() handler returned without answering within answerTimeoutMs (${policy.answerTimeoutMs} ms): its claim is released`,
      );
      return undefined;
    }
    // The route renders the outcome after the handler settled: its write, or the socket closing
    // first, decides; an outer layer that never writes is waited for up to `answerTimeoutMs`.
    const written = await settlement.writeAfterSettlement(policy.answerTimeoutMs);
    // The handler's own write may land after it settled (a Fastify onSend hook that awaits).
    const lateOwn = settlement.handlerResponse;
    if (lateOwn) return this.recordOfOwnAnswer(lateOwn, outcome);
    if (written && isRenderingOf(written, outcome, { ...this.routeAtSettlement, redirects }, policy)) {
      return toStored(written, ownHeaders);
    }
    return toStored(renderHandlerOutcome(outcome, this.routeAtSettlement), ownHeaders);
  }

  /** The record of a handler that wrote its own answer. */
  private recordOfOwnAnswer(own: CapturedResponse, outcome: HandlerOutcome): StoredResponse {
    const { policy, ownHeaders } = this.route;
    if (outcome.ok || !policy.transactional) return toStored(own, ownHeaders);
    // A transactional handler that answered, then failed: its writes roll back, so its answer
    // must not go out as if they had not; the client and the record get its failure.
    this.replaceOwnAnswer = renderHandlerOutcome(outcome, this.routeAtSettlement);
    return toStored(this.replaceOwnAnswer, ownHeaders);
  }

  /** {@link ClaimedAttempt.nested} */
  nested(): boolean {
    return this.settlement.inHandlerFlow;
  }

  /** {@link ClaimedAttempt.outcome} */
  async outcome(): Promise<HandlerOutcome | 'released'> {
    const outcome = await this.handled.promise;
    this.settlement.supersede();
    const result = await this.executed.promise;
    const stored = this.recordedResponse;
    const released =
      result.kind !== 'sent' ||
      !stored ||
      decideOutcome(stored.statusCode, this.route.policy, this.recordedOverride) === 'release';
    return released && result.kind !== 'not-run' ? 'released' : outcome;
  }

  /** The handler's outcome, for Nest's pipeline. */
  handOut(): Observable<unknown> {
    const { handled, settlement, raw } = this;
    return new Observable<unknown>((subscriber) => {
      let handedOut = false;
      void handled.promise.then((outcome) => {
        handedOut = true;
        if (outcome.ok) {
          subscriber.next(outcome.value);
          subscriber.complete();
        } else subscriber.error(outcome.error);
      });
      return () => {
        // Dropped before the outcome was handed out: an outer layer answered on its own, or the client left.
        if (!handedOut) {
          if (isGone(raw)) settlement.close();
          settlement.dropped();
        }
      };
    });
  }
}

/** A claimed request of this request object already ran (or runs): how it ended. */
interface ClaimedAttempt {
  /** Called from inside this attempt's handler (the interceptor bound twice): not a re-entry. */
  nested(): boolean;
  /** The first attempt's outcome once its record is decided, or `released` when its key was freed. */
  outcome(): Promise<HandlerOutcome | 'released'>;
}

/**
 * The claimed attempt of a request, kept on the request object: an outer `retry()` subscribes to
 * the same request again. Not a `WeakMap` keyed by the request: the attempt references the
 * request back, an entry only a full collection can prove dead: V8's young-generation collections
 * kept every claimed request's whole object graph and promoted it to the old generation
 * (docs/performance.md, "Garbage the library kept alive").
 */
const ATTEMPT = Symbol('idempotency.attempt');
type AttemptCarrier = { [ATTEMPT]?: ClaimedAttempt };

/**
 * A claimed attempt of `request` exists and the caller is not inside its handler: the request is
 * being subscribed again from outside (an outer `timeout()` dropped the attempt, then `retry()`),
 * not handled by an interceptor bound twice on the route.
 */
export function resubscribedWhileClaimed(request: object): boolean {
  const attempt = (request as AttemptCarrier)[ATTEMPT];
  return attempt !== undefined && !attempt.nested();
}

/**
 * Re-entry of a request already claimed (an outer `retry()` re-subscribing): the first attempt's
 * outcome, its failure re-thrown and its success handed out again, or undefined when that attempt
 * was released and the request may be claimed anew (docs/contract.md B.7 rule 17a).
 */
export function reenteredAttempt(request: object): Promise<Observable<unknown> | undefined> | undefined {
  const attempt = (request as AttemptCarrier)[ATTEMPT];
  // Inside the attempt's own handler it is no re-entry: waiting for the attempt would wait for itself.
  if (!attempt || attempt.nested()) return undefined;
  return attempt.outcome().then((outcome) => {
    if (outcome === 'released') {
      // Cleared by assignment: a `delete` would turn Node's request object into a slow dictionary.
      (request as AttemptCarrier)[ATTEMPT] = undefined;
      return undefined;
    }
    return outcome.ok ? of(outcome.value) : throwError(() => outcome.error);
  });
}

/** The response was sent or its connection closed (before the claim was won: the handler must not run). */
export function responseAnswered(response: HttpResponse): boolean {
  const raw = (response.raw ?? response) as ServerResponse;
  return raw.headersSent || raw.writableEnded || isGone(raw);
}

function isGone(raw: ServerResponse): boolean {
  return raw.destroyed || raw.socket?.destroyed === true;
}

function asReplacement(answer: CapturedResponse): ReplacementResponse {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(answer.headers)) {
    if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(', ') : String(value);
  }
  return { statusCode: answer.statusCode, headers, body: answer.body ?? Buffer.alloc(0) };
}

function toStored(captured: CapturedResponse, ownHeaders: ReadonlySet<string>): StoredResponse {
  const headers = replayableHeaders(captured.headers, ownHeaders);
  // Bytes compressed for this client (a Fastify onSend hook) are no body to replay to another (B.8 rule 21).
  const encoded = headers['content-encoding'] !== undefined && headers['content-encoding'] !== 'identity';
  return captured.bodyOmitted || encoded
    ? { statusCode: captured.statusCode, headers, bodyOmitted: true }
    : { statusCode: captured.statusCode, headers, body: captured.body };
}

/**
 * The status and headers the response carries now, for rendering the handler's outcome; without
 * the `Content-*` headers when another answer has been written over them.
 */
function routeResponseState(
  response: HttpResponse,
  raw: ServerResponse,
  withoutRepresentation = false,
): RouteResponseState {
  const reply = response as { getHeaders?: () => OutgoingHttpHeaders };
  let headers: OutgoingHttpHeaders = response.raw ? { ...raw.getHeaders(), ...reply.getHeaders?.() } : raw.getHeaders();
  if (withoutRepresentation)
    headers = Object.fromEntries(Object.entries(headers).filter(([name]) => !/^content-/i.test(name)));
  return { statusCode: raw.statusCode, headers, platform: response.raw ? 'fastify' : 'express' };
}

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}
