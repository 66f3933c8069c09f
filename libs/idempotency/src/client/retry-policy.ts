import type { ResolvedClientOptions, RetryableAnswer } from './idempotent-client.options.js';

/**
 * When an idempotent client retries, and after how long: the rules of docs/client.md, as pure
 * functions of one attempt's outcome, shared by the `fetch` and axios adapters.
 */

/** Statuses that say "not now" rather than "no": the same request may succeed later. */
const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([408, 429, 502, 503, 504]);

/** Methods a client may resend without a key: idempotent by HTTP semantics (RFC 9110 §9.2.2). */
const IDEMPOTENT_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']);

/** The suffix of our 409's problem type (docs/contract.md B.11). */
const IN_PROGRESS_TYPE_SUFFIX = 'idempotency-request-in-progress';

/** What one attempt came to. */
export type AttemptOutcome =
  /** The server answered (any status). */
  | { kind: 'answer'; answer: RetryableAnswer }
  /** No answer: the connection failed or was cut before a response arrived. */
  | { kind: 'network-error' };

/** Why an operation stopped retrying. */
export type StopReason =
  /** The answer is final (2xx, 4xx other than the retryable ones, 500, ...). */
  | 'final-answer'
  /** The method is neither keyed nor idempotent: resending it could repeat its effect. */
  | 'unsafe-method'
  | 'max-attempts'
  /** The next attempt would start after the deadline. */
  | 'deadline'
  /** The client's retry budget is spent. */
  | 'budget'
  /** The server asked for a wait longer than `maxRetryAfterMs`. */
  | 'retry-after-too-long';

export type RetryDecision = { retry: true; delayMs: number } | { retry: false; reason: StopReason };

/** True when the answer is a 409 that says the same key is still being processed. */
export function isInProgressConflict(answer: RetryableAnswer, options: ResolvedClientOptions): boolean {
  if (answer.status !== 409) return false;
  const type = (answer.problem as { type?: unknown } | undefined)?.type;
  if (typeof type === 'string' && type.endsWith(IN_PROGRESS_TYPE_SUFFIX)) return true;
  return options.isInProgress?.(answer) === true;
}

/** True when the answer asks to try again later (docs/client.md, "What each answer means"). */
export function isRetryableAnswer(answer: RetryableAnswer, options: ResolvedClientOptions): boolean {
  return RETRYABLE_STATUSES.has(answer.status) || isInProgressConflict(answer, options);
}

/** True when resending `method` cannot repeat an effect: it carries a key, or it is idempotent. */
export function isRetryableMethod(method: string, keyed: boolean): boolean {
  return keyed || IDEMPOTENT_METHODS.has(method.toUpperCase());
}

/**
 * `Retry-After` in ms from `nowMs`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3); undefined
 * when absent or unreadable (the backoff applies then). A date in the past means no wait.
 */
export function parseRetryAfter(value: string | null, nowMs: number): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // An HTTP-date always names its weekday; a bare number or other text is no date.
  if (!/^[A-Za-z]{3},/.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

/** Capped exponential backoff with full jitter: a random wait in [0, min(max, base × 2^(retry-1))). */
export function backoffDelay(retry: number, options: ResolvedClientOptions): number {
  const ceiling = Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** Math.max(0, retry - 1));
  return Math.floor(options.random() * ceiling);
}

/**
 * One logical operation: its attempts, its deadline and what it took from the retry budget.
 * The adapters count each attempt in `attempts` and call `next()` after it.
 */
export class RetryOperation {
  attempts = 0;
  private readonly deadlineAt: number;
  private lastRetryCost: number | undefined;

  constructor(
    private readonly options: ResolvedClientOptions,
    /** Whether a retry cannot repeat an effect (see {@link isRetryableMethod}). */
    private readonly retryable: boolean,
  ) {
    this.deadlineAt = options.now() + options.deadlineMs;
  }

  /** Milliseconds until the deadline (0 once it passed). */
  remainingMs(): number {
    return Math.max(0, this.deadlineAt - this.options.now());
  }

  /** Decides what follows an attempt: a retry after a delay, or the reason to stop. */
  next(outcome: AttemptOutcome): RetryDecision {
    const retryableOutcome = outcome.kind === 'network-error' || isRetryableAnswer(outcome.answer, this.options);
    if (!retryableOutcome) return this.stop('final-answer');
    if (!this.retryable) return { retry: false, reason: 'unsafe-method' };
    if (this.attempts >= this.options.maxAttempts) return { retry: false, reason: 'max-attempts' };
    let delayMs = backoffDelay(this.attempts, this.options);
    if (outcome.kind === 'answer') {
      const asked = parseRetryAfter(outcome.answer.header('retry-after'), this.options.now());
      if (asked !== undefined && asked > this.options.maxRetryAfterMs) {
        return { retry: false, reason: 'retry-after-too-long' };
      }
      if (asked !== undefined) delayMs = asked;
    }
    if (delayMs >= this.remainingMs()) return { retry: false, reason: 'deadline' };
    if (this.options.retryBudget) {
      const cost = this.options.retryBudget.tryAcquire(outcome.kind === 'network-error' ? 'network-error' : 'answer');
      if (cost === undefined) return { retry: false, reason: 'budget' };
      this.lastRetryCost = cost;
    }
    return { retry: true, delayMs };
  }

  /** A final answer arrived: the budget gets back what the last retry took. */
  private stop(reason: 'final-answer'): RetryDecision {
    this.options.retryBudget?.release(this.lastRetryCost);
    return { retry: false, reason };
  }
}
