import { RetryBudget } from './retry-budget.js';

/**
 * What the client is told about an answer it may retry: enough to recognise a server's own
 * "request in progress" 409 when its problem type is not ours.
 */
export interface RetryableAnswer {
  status: number;
  /** A response header by name (case-insensitive), or null. */
  header(name: string): string | null;
  /** The body parsed as JSON when it was JSON (a problem document), else undefined. */
  problem: unknown;
}

/**
 * Options of an idempotent client (`withIdempotency()` for `fetch`, `withIdempotencyAxios()` for
 * axios and Nest's `HttpService`). Every field is optional; the defaults suit a call from one
 * service to another.
 *
 * @publicApi
 */
export interface IdempotentClientOptions {
  /** Attempts in all, the first included. @default 4 */
  maxAttempts?: number;
  /** The backoff's first ceiling, in ms: retry n waits a random time in [0, min(max, base × 2^(n-1))). @default 500 */
  baseDelayMs?: number;
  /** The backoff's largest ceiling, in ms. @default 8_000 */
  maxDelayMs?: number;
  /**
   * The longest `Retry-After` honoured, in ms. A server that asks for a longer wait gets no
   * retry: its answer is returned. @default 20_000
   */
  maxRetryAfterMs?: number;
  /**
   * The whole operation's deadline, in ms from the call, all attempts and waits included: no
   * retry starts that would wait past it, and a `fetch` attempt still running at it is aborted.
   * @default 30_000
   */
  deadlineMs?: number;
  /**
   * Retry budget shared by every call of this client (a token bucket, as AWS SDKs' retry quota):
   * each retry takes tokens, each answer that needs none gives one back, so a dependency that
   * keeps failing is not hammered. Pass one instance to several clients to share it; `false`
   * turns it off. @default new RetryBudget()
   */
  retryBudget?: RetryBudget | false;
  /** Methods that carry an Idempotency-Key (others pass through without one). @default ['POST', 'PATCH'] */
  keyedMethods?: readonly string[];
  /** Name of the key header. @default 'Idempotency-Key' */
  keyHeader?: string;
  /** Name of the header that marks a replayed answer. @default 'Idempotent-Replayed' */
  replayHeader?: string;
  /**
   * Recognises another server's "request in progress" 409 (retried like ours, whose problem
   * `type` ends in `idempotency-request-in-progress`). Other 409s are never retried.
   */
  isInProgress?: (answer: RetryableAnswer) => boolean;
  /** Random number in [0, 1) for the jitter (tests pass their own). @default Math.random */
  random?: () => number;
  /** Clock in epoch ms (tests pass their own). @default Date.now */
  now?: () => number;
  /** Waits `ms`, rejecting with the signal's reason when it aborts (tests pass their own). */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/** The options with every default filled in: merged once, when a client is created. */
export interface ResolvedClientOptions extends Required<Omit<IdempotentClientOptions, 'retryBudget' | 'isInProgress'>> {
  retryBudget: RetryBudget | undefined;
  isInProgress: ((answer: RetryableAnswer) => boolean) | undefined;
  keyedMethods: readonly string[];
}

export function resolveClientOptions(options: IdempotentClientOptions = {}): ResolvedClientOptions {
  const resolved: ResolvedClientOptions = {
    maxAttempts: options.maxAttempts ?? 4,
    baseDelayMs: options.baseDelayMs ?? 500,
    maxDelayMs: options.maxDelayMs ?? 8_000,
    maxRetryAfterMs: options.maxRetryAfterMs ?? 20_000,
    deadlineMs: options.deadlineMs ?? 30_000,
    retryBudget: options.retryBudget === false ? undefined : (options.retryBudget ?? new RetryBudget()),
    keyedMethods: (options.keyedMethods ?? ['POST', 'PATCH']).map((method) => method.toUpperCase()),
    keyHeader: options.keyHeader ?? 'Idempotency-Key',
    replayHeader: options.replayHeader ?? 'Idempotent-Replayed',
    isInProgress: options.isInProgress,
    random: options.random ?? Math.random,
    now: options.now ?? Date.now,
    sleep: options.sleep ?? abortableSleep,
  };
  for (const name of ['maxAttempts', 'baseDelayMs', 'maxDelayMs', 'maxRetryAfterMs', 'deadlineMs'] as const) {
    const value = resolved[name];
    const least = name === 'maxAttempts' ? 1 : 0;
    if (!Number.isFinite(value) || value < least) {
      throw new RangeError(`${name} must be a finite number of at least ${least} (got ${value}).`);
    }
  }
  return resolved;
}

/** `setTimeout` as a promise that an AbortSignal cuts short (with the signal's reason). */
export function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
