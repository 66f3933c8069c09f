import { resolveClientOptions } from './idempotent-client.options.js';
import { RetryBudget } from './retry-budget.js';
import { backoffDelay, isRetryableMethod, parseRetryAfter, RetryOperation } from './retry-policy.js';

const NOW = Date.parse('2026-11-27T00:00:00Z');
const answer = (status: number, headers: Record<string, string> = {}, problem?: unknown) => ({
  kind: 'answer' as const,
  answer: { status, header: (name: string) => headers[name.toLowerCase()] ?? null, problem },
});

describe('parseRetryAfter', () => {
  it.each<[string | null, number | undefined]>([
    ['0', 0],
    ['3', 3000],
    [' 12 ', 12_000],
    [new Date(NOW + 5000).toUTCString(), 5000],
    [new Date(NOW - 5000).toUTCString(), 0],
    [null, undefined],
    ['', undefined],
    ['-1', undefined],
    ['1.5', undefined],
    ['soon', undefined],
    ['Fri, 99 Foo 2026 00:00:00 GMT', undefined],
  ])('%p → %p ms', (value, expected) => {
    expect(parseRetryAfter(value, NOW)).toBe(expected);
  });
});

describe('backoffDelay (capped exponential, full jitter)', () => {
  it('draws in [0, min(max, base × 2^(retry-1)))', () => {
    const options = resolveClientOptions({ baseDelayMs: 100, maxDelayMs: 1000, random: () => 0.999 });
    expect([1, 2, 3, 4, 5, 6].map((retry) => backoffDelay(retry, options))).toEqual([99, 199, 399, 799, 999, 999]);
    expect(backoffDelay(3, resolveClientOptions({ random: () => 0 }))).toBe(0);
  });
});

describe('isRetryableMethod', () => {
  it('a keyed call, or a method idempotent by HTTP semantics', () => {
    expect(isRetryableMethod('POST', true)).toBe(true);
    expect(isRetryableMethod('POST', false)).toBe(false);
    expect(isRetryableMethod('PATCH', false)).toBe(false);
    for (const method of ['GET', 'head', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']) {
      expect(isRetryableMethod(method, false)).toBe(true);
    }
  });
});

describe('RetryOperation', () => {
  const operation = (extra = {}) =>
    new RetryOperation(resolveClientOptions({ now: () => NOW, random: () => 0.5, retryBudget: false, ...extra }), true);

  it('a 409 is retried only when it says in progress (our type suffix, or the predicate)', () => {
    const op = operation({
      isInProgress: (a: { problem: unknown }) => (a.problem as { busy?: boolean })?.busy === true,
    });
    op.attempts = 1;
    expect(op.next(answer(409, {}, { type: 'urn:x:idempotency-request-in-progress' })).retry).toBe(true);
    expect(op.next(answer(409, {}, { busy: true })).retry).toBe(true);
    expect(op.next(answer(409, {}, { type: 'urn:x:idempotency-replay-unavailable' }))).toEqual({
      retry: false,
      reason: 'final-answer',
    });
  });

  it('a budget that cannot pay for the retry stops it and takes nothing', () => {
    const budget = new RetryBudget({ capacity: 12, retryCost: 5, networkErrorCost: 10 });
    const op = operation({ retryBudget: budget });
    op.attempts = 1;
    expect(op.next({ kind: 'network-error' }).retry).toBe(true);
    expect(budget.available).toBe(2);
    expect(op.next(answer(503))).toEqual({ retry: false, reason: 'budget' });
    expect(budget.available).toBe(2);
    // The final answer gives back what the last retry took.
    expect(op.next(answer(200))).toEqual({ retry: false, reason: 'final-answer' });
    expect(budget.available).toBe(12);
  });
});

describe('resolveClientOptions', () => {
  it.each(['maxAttempts', 'baseDelayMs', 'maxDelayMs', 'maxRetryAfterMs', 'deadlineMs'])(
    'refuses a negative or non-finite %s',
    (name) => {
      expect(() => resolveClientOptions({ [name]: -1 })).toThrow(RangeError);
      expect(() => resolveClientOptions({ [name]: Number.NaN })).toThrow(`${name} must be a finite number`);
    },
  );
  it('refuses maxAttempts 0 and a negative budget size', () => {
    expect(() => resolveClientOptions({ maxAttempts: 0 })).toThrow('maxAttempts must be a finite number of at least 1');
    expect(() => new RetryBudget({ capacity: -5 })).toThrow('RetryBudget capacity');
  });
});
