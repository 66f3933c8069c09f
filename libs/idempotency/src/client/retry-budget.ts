/** How the retry budget is sized (the defaults are those of AWS SDKs' standard retry quota). */
export interface RetryBudgetOptions {
  /** Tokens when full. @default 500 */
  capacity?: number;
  /** Tokens a retry after an error answer (5xx, 429, 409 in progress) takes. @default 5 */
  retryCost?: number;
  /** Tokens a retry after a network error or a timeout takes: such failures cost the dependency more. @default 10 */
  networkErrorCost?: number;
  /** Tokens an answer that needed no retry gives back. @default 1 */
  successRefund?: number;
}

/**
 * A retry budget: a token bucket shared by all the calls of a client (or of several clients).
 * Every retry spends tokens and an operation that ends with a final answer refunds what its
 * last retry took (or `successRefund` when it needed none); when the bucket is empty, calls
 * still make their first attempt but no longer retry, so a failing dependency sees at most its
 * normal traffic instead of `maxAttempts` times it.
 *
 * @example
 * const budget = new RetryBudget({ capacity: 100 });
 * const payments = withIdempotency(fetch, { retryBudget: budget });
 * const ledger = withIdempotency(fetch, { retryBudget: budget }); // one budget for both
 * @publicApi
 */
export class RetryBudget {
  private readonly capacity: number;
  private readonly retryCost: number;
  private readonly networkErrorCost: number;
  private readonly successRefund: number;
  private tokens: number;

  constructor(options: RetryBudgetOptions = {}) {
    this.capacity = options.capacity ?? 500;
    this.retryCost = options.retryCost ?? 5;
    this.networkErrorCost = options.networkErrorCost ?? 10;
    this.successRefund = options.successRefund ?? 1;
    for (const [name, value] of Object.entries(this)) {
      if (typeof value === 'number' && (!Number.isFinite(value) || value < 0)) {
        throw new RangeError(`RetryBudget ${name} must be a finite number of at least 0 (got ${value}).`);
      }
    }
    this.tokens = this.capacity;
  }

  /** Tokens left. */
  get available(): number {
    return this.tokens;
  }

  /**
   * Takes what one retry costs; resolves to the tokens taken, or undefined (and takes nothing)
   * when too few are left.
   */
  tryAcquire(cause: 'answer' | 'network-error'): number | undefined {
    const cost = cause === 'network-error' ? this.networkErrorCost : this.retryCost;
    if (cost > this.tokens) return undefined;
    this.tokens -= cost;
    return cost;
  }

  /** An operation ended with a final answer: gives back what its last retry took, or the refund. */
  release(lastRetryCost: number | undefined): void {
    this.tokens = Math.min(this.capacity, this.tokens + (lastRetryCost ?? this.successRefund));
  }
}
