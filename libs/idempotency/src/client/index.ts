/**
 * `nestjs-idempotency/client`: the client half of safe retries. Calls to other services carry
 * an Idempotency-Key (inside a claimed handler, the request's derived key) and are retried only
 * when that cannot repeat an effect (docs/client.md). Needs no HTTP client of its own: it wraps
 * `fetch`, or an axios instance (Nest's `HttpService.axiosRef`).
 *
 * @example
 * import { withIdempotency } from 'nestjs-idempotency/client';
 * const callPayments = withIdempotency(fetch);
 * const res = await callPayments(url, { method: 'POST', body, headers: { 'Content-Type': 'application/json' } });
 * @publicApi
 */
export {
  withIdempotency,
  isReplayMarker,
  type FetchLike,
  type IdempotentCallOutcome,
  type IdempotentFetch,
  type IdempotentRequestInit,
  type IdempotentResponse,
} from './with-idempotency.js';
export { withIdempotencyAxios, type AxiosLikeInstance, type IdempotentAxiosConfig } from './with-idempotency-axios.js';
export type { IdempotentClientOptions, RetryableAnswer } from './idempotent-client.options.js';
export { RetryBudget, type RetryBudgetOptions } from './retry-budget.js';
export { IdempotentRequestError, type IdempotentRequestFailure } from './idempotent-request.error.js';
export type { IdempotencyKeySource } from './idempotency-key-source.js';
export type { StopReason } from './retry-policy.js';
export { currentIdempotencyContext } from '../context/idempotency-request-context.js';
