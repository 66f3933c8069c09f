/**
 * Running a claimed request: the handler runs once under the engine, its response is held back
 * until its record is stored, and the record follows what the handler itself did, whatever an
 * outer layer answers (docs/contract.md B.7 rule 17a).
 */
import type { CallHandler, ExecutionContext, Logger } from '@nestjs/common';
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { from, lastValueFrom, type Observable } from 'rxjs';
import { IDEMPOTENCY_CONTEXT } from '../decorators/idempotency-context.decorator.js';
import type { IdempotencyClaim } from '../engine/idempotency-claim.js';
import { IdempotencyContextRef } from '../engine/idempotency-context.js';
import type { ExecutionResult, HandlerOutcome } from '../engine/idempotency-engine.types.js';
import type { IdempotencyService } from '../engine/idempotency.service.js';
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

/**
 * How long the record waits, once the handler settled, for the route to write its rendering of
 * the outcome (an exception filter's body, an outer interceptor's envelope). Nest writes at
 * once; only an outer layer that awaits something after the handler delays it. Past this, the
 * record is rendered from the handler's result itself.
 */
const WRITE_AFTER_SETTLEMENT_GRACE_MS = 1000;

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
  { policy, outcome: routeOutcome, ownHeaders, handlerWrites, passthrough, redirects }: RouteState,
  echo: string | undefined,
  { engine, logger, createProblem }: ClaimedRequestDeps,
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
  /** What replaces the handler's own held answer when its transaction rolled back under it. */
  let replaceOwnAnswer: CapturedResponse | undefined;

  // Installed before the handler starts: a handler may write its response synchronously.
  // A transactional response must not leave before its commit, however large it is.
  const holdBytes = policy.transactional ? Number.POSITIVE_INFINITY : policy.maxStoredResponseBytes;
  new ResponseCapture(raw, holdBytes, async (captured) => {
    // Classified synchronously: the handler's flow is only visible from the writer's own call.
    // An outer layer's answer before the handler settled is not the record: it leaves at once.
    const origin = settlement.written(captured);
    if (origin === 'early') return undefined;
    const result = await executed.promise;
    if (result.kind === 'replaced') {
      return problemResponse(
        createProblem(notRunProblemKind(result.reason), { echo, retryAfterSeconds: result.retryAfterSeconds }),
      );
    }
    return origin === 'handler' && replaceOwnAnswer ? asReplacement(replaceOwnAnswer) : undefined;
  });
  // The client may have gone while the claim was being made: 'close' has fired already.
  if (raw.destroyed || raw.socket?.destroyed) settlement.close();
  else raw.once('close', () => settlement.close());

  const recordOf = async (outcome: HandlerOutcome): Promise<StoredResponse> => {
    const own = settlement.handlerResponse;
    if (own && (outcome.ok || !policy.transactional)) return toStored(own, ownHeaders);
    if (own) {
      // A transactional handler that answered, then failed: its writes roll back, so its answer
      // must not go out as if they had not; the client and the record get its failure.
      replaceOwnAnswer = renderHandlerOutcome(outcome, routeAtSettlement);
      return toStored(replaceOwnAnswer, ownHeaders);
    }
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
    if (handlerWrites && outcome.ok) {
      // A handler given the response may answer from a callback after it returned: that write,
      // whatever its status, is its answer. None in time: it did not answer through Nest either.
      const late = await Promise.race([
        settlement.handlerWrote(),
        settlement.writeAfterSettlement(WRITE_AFTER_SETTLEMENT_GRACE_MS),
      ]);
      const answer = settlement.handlerResponse;
      if (answer) return toStored(answer, ownHeaders);
      if (late && isRenderingOf(late, outcome, { ...routeAtSettlement, redirects }, policy)) {
        return toStored(late, ownHeaders);
      }
      const rendered = renderHandlerOutcome(outcome, routeAtSettlement);
      return toStored(outcome.value === undefined ? { ...rendered, bodyOmitted: true } : rendered, ownHeaders);
    }
    const written = await settlement.writeAfterSettlement(WRITE_AFTER_SETTLEMENT_GRACE_MS);
    if (written && isRenderingOf(written, outcome, { ...routeAtSettlement, redirects }, policy)) {
      return toStored(written, ownHeaders);
    }
    return toStored(renderHandlerOutcome(outcome, routeAtSettlement), ownHeaders);
  };

  void engine
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
        if (first.own && !policy.transactional) return toStored(first.own, ownHeaders);
        return recordOf(first.outcome ?? (await ran));
      },
      // Read once the handler settled, so a thrown error's forced outcome counts.
      override: (settled) =>
        idem.outcome ?? (settled && !settled.ok ? forcedOutcomeOf(settled.error) : undefined) ?? routeOutcome,
    })
    .then((result) => {
      settlement.end();
      executed.resolve(result);
      if (result.kind === 'not-run') {
        const problem = createProblem(notRunProblemKind(result.reason), {
          echo,
          retryAfterSeconds: result.retryAfterSeconds,
        });
        handled.resolve({ ok: false, error: problem });
      }
    })
    .catch((error: unknown) => {
      // The engine freed the claim; whatever was written must still reach the client.
      logger.error(`the outcome of a request could not be recorded: ${String(error)}`);
      settlement.end();
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
