import { resolveAmqpRedelivery } from './amqp-redelivery.options.js';
import { failedAttemptsOf, retryPlan } from './amqp-retry-delay.js';

describe('retryPlan', () => {
  const options = resolveAmqpRedelivery({ queue: 'orders', retryDelayMs: 500, maxRetryDelayMs: 4000, maxAttempts: 5 });

  it('backs off exponentially on transient failures, capped, and gives up after maxAttempts', () => {
    const transient = { action: 'retry', reason: 'transient-failure' } as const;
    expect([0, 1, 2, 3].map((failed) => retryPlan(transient, failed, options))).toEqual([
      { kind: 'retry', delayMs: 500, attempts: 1 },
      { kind: 'retry', delayMs: 1000, attempts: 2 },
      { kind: 'retry', delayMs: 2000, attempts: 3 },
      { kind: 'retry', delayMs: 4000, attempts: 4 },
    ]);
    expect(retryPlan(transient, 4, options)).toEqual({ kind: 'give-up', attempts: 5 });
  });

  it('holds an in-progress duplicate for the remaining lease, without counting an attempt', () => {
    const inProgress = (retryAfterMs: number) => ({ action: 'retry', reason: 'in-progress', retryAfterMs }) as const;
    expect(retryPlan(inProgress(3000), 2, options)).toEqual({ kind: 'retry', delayMs: 3000, attempts: 2 });
    expect(retryPlan(inProgress(100), 0, options)).toEqual({ kind: 'retry', delayMs: 500, attempts: 0 });
    expect(retryPlan(inProgress(60_000), 9, options)).toEqual({ kind: 'retry', delayMs: 4000, attempts: 9 });
  });

  it('reads the attempts header leniently', () => {
    expect(failedAttemptsOf({ a: 3 }, 'a')).toBe(3);
    expect(failedAttemptsOf({ a: '2' }, 'a')).toBe(2);
    expect(failedAttemptsOf({ a: 'x' }, 'a')).toBe(0);
    expect(failedAttemptsOf(undefined, 'a')).toBe(0);
  });
});

describe('resolveAmqpRedelivery', () => {
  it('names the retry and dead-letter queues after the queue', () => {
    expect(resolveAmqpRedelivery({ queue: 'orders' })).toMatchObject({
      retryQueue: 'orders.retry',
      deadLetterQueue: 'orders.dead-letter',
    });
  });
  it('refuses a missing queue, a retry queue equal to it, and non-positive numbers', () => {
    expect(() => resolveAmqpRedelivery({ queue: '' })).toThrow(/queue/);
    expect(() => resolveAmqpRedelivery({ queue: 'a', retryQueue: 'a' })).toThrow(/differ/);
    expect(() => resolveAmqpRedelivery({ queue: 'a', maxAttempts: 0 })).toThrow(/maxAttempts/);
  });
});
