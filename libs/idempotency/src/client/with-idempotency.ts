import { trackContexts } from '../context/idempotency-request-context.js';
import { chooseIdempotencyKey, defaultCallName, type IdempotencyKeySource } from './idempotency-key-source.js';
import {
  resolveClientOptions,
  type IdempotentClientOptions,
  type RetryableAnswer,
} from './idempotent-client.options.js';
import { IdempotentRequestError, type IdempotentRequestFailure } from './idempotent-request.error.js';
import { isRetryableMethod, RetryOperation, type StopReason } from './retry-policy.js';

/** `fetch`'s own signature: the global `fetch`, undici's, or any wrapper of them. */
export type FetchLike = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** `RequestInit` plus what an idempotent call may say about its key. */
export interface IdempotentRequestInit extends RequestInit {
  /** The key of this operation. @default the request's derived key inside a claimed handler, else a random UUID */
  idempotencyKey?: string;
  /**
   * Inside a claimed handler: the name the key is derived under (`derivedKey(name)`). Give one
   * when a handler makes two different calls to the same URL. @default `${method} ${origin}${path}`
   */
  idempotencyKeyName?: string;
}

/** What happened to one idempotent call. */
export interface IdempotentCallOutcome {
  /** The key every attempt carried; undefined for a method sent without one. */
  key: string | undefined;
  keySource: IdempotencyKeySource | undefined;
  /** Attempts made, the first included. */
  attempts: number;
  /** True when the server said the answer is a replay (`Idempotent-Replayed: true`). */
  replayed: boolean;
  /** Why no further attempt was made: `final-answer` unless retries ran out on a retryable answer. */
  stoppedBy: StopReason;
}

/** A `Response` that says how it was obtained. */
export type IdempotentResponse = Response & { readonly idempotency: IdempotentCallOutcome };

/** A `fetch` that sends keyed, safely retried requests. */
export type IdempotentFetch = (
  input: string | URL | Request,
  init?: IdempotentRequestInit,
) => Promise<IdempotentResponse>;

/**
 * Wraps `fetch` so that every call is one logical operation with one Idempotency-Key, retried
 * when that is safe and useful (docs/client.md): POST and PATCH carry the key (the caller's, the
 * claimed request's derived key, or a random one) on every attempt; other methods pass through
 * and are retried only when idempotent by HTTP semantics. It retries a network error before an
 * answer, 408, 429, 502, 503, 504 and a 409 "request in progress", with capped exponential
 * backoff and full jitter or the server's `Retry-After`, within `maxAttempts`, the deadline, the
 * caller's `AbortSignal` and the client's retry budget. The answer says the attempts made and
 * whether it was a replay; a call that gets no answer throws {@link IdempotentRequestError}.
 *
 * @example
 * const pay = withIdempotency(fetch, { maxAttempts: 5 });
 * const res = await pay('https://payments.example.com/charges', {
 *   method: 'POST',
 *   headers: { 'Content-Type': 'application/json' },
 *   body: JSON.stringify({ amountCents: 1200 }),
 * });
 * console.log(res.status, res.idempotency.attempts, res.idempotency.replayed);
 * @publicApi
 */
export function withIdempotency(fetchFn: FetchLike = fetch, options: IdempotentClientOptions = {}): IdempotentFetch {
  const resolved = resolveClientOptions(options);
  trackContexts();
  return async (input, init = {}) => {
    const { idempotencyKey, idempotencyKeyName, ...requestInit } = init;
    // One template, cloned per attempt: a body is sent again as it was (a stream is teed).
    const streamed = requestInit.body instanceof ReadableStream;
    const template = new Request(input, streamed ? { ...requestInit, duplex: 'half' } : requestInit);
    const method = template.method;
    const keyed = resolved.keyedMethods.includes(method);
    let key: string | undefined;
    let keySource: IdempotencyKeySource | undefined;
    if (keyed) {
      const preset = template.headers.get(resolved.keyHeader) ?? undefined;
      ({ key, source: keySource } = chooseIdempotencyKey(
        idempotencyKey ?? preset,
        idempotencyKeyName ?? defaultCallName(method, template.url),
      ));
      template.headers.set(resolved.keyHeader, key);
    }
    const signal = template.signal;
    const operation = new RetryOperation(resolved, isRetryableMethod(method, keyed));
    const fail = (reason: IdempotentRequestFailure, cause: unknown) =>
      new IdempotentRequestError(reason, operation.attempts, key, keySource, { cause });

    for (;;) {
      operation.attempts += 1;
      const attempt = attemptSignal(signal, operation.remainingMs());
      let response: Response;
      try {
        response = await fetchFn(template.clone(), { signal: attempt.signal });
        attempt.dispose();
      } catch (error) {
        attempt.dispose();
        if (signal.aborted) throw signal.reason;
        if (attempt.deadlineHit()) throw fail('deadline', error);
        const decision = operation.next({ kind: 'network-error' });
        // A call that could never be retried fails as the wrapped fetch failed.
        if (!decision.retry && decision.reason === 'unsafe-method') throw error;
        if (!decision.retry) throw fail(decision.reason as IdempotentRequestFailure, error);
        await resolved.sleep(decision.delayMs, signal);
        continue;
      }
      const decision = operation.next({ kind: 'answer', answer: await answerOf(response) });
      if (!decision.retry) {
        const replayed = isReplayMarker(response.headers.get(resolved.replayHeader));
        const outcome: IdempotentCallOutcome = {
          key,
          keySource,
          attempts: operation.attempts,
          replayed,
          stoppedBy: decision.reason,
        };
        Object.defineProperty(response, 'idempotency', { value: outcome, enumerable: false, configurable: true });
        return response as IdempotentResponse;
      }
      // Frees the connection: this answer is not returned.
      await response.body?.cancel().catch(() => undefined);
      await resolved.sleep(decision.delayMs, signal);
    }
  };
}

/**
 * Whether a replay header's value says "replayed": `true` (our default) or the Structured Field
 * Boolean `?1` (an option of the server).
 *
 * @example isReplayMarker(res.headers.get('Idempotent-Replayed')); // true on a replay
 * @publicApi
 */
export function isReplayMarker(value: string | null | undefined): boolean {
  return value === 'true' || value === '?1';
}

/** What the retry rules read of a response; a 409's JSON body is read from a clone. */
async function answerOf(response: Response): Promise<RetryableAnswer> {
  let problem: unknown;
  if (response.status === 409 && /json/i.test(response.headers.get('content-type') ?? '')) {
    problem = await response
      .clone()
      .json()
      .catch(() => undefined);
  }
  return { status: response.status, header: (name) => response.headers.get(name), problem };
}

/** The signal of one attempt: the caller's, and the operation's deadline (`deadlineHit()` tells which). */
function attemptSignal(caller: AbortSignal, remainingMs: number) {
  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(new Error('the deadline of the idempotent call passed')), remainingMs);
  return {
    signal: AbortSignal.any([caller, deadline.signal]),
    deadlineHit: () => deadline.signal.aborted,
    dispose: () => clearTimeout(timer),
  };
}
