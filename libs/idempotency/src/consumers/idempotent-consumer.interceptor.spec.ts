import type { CallHandler, ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { lastValueFrom, of } from 'rxjs';
import type { IdempotencyService } from '../engine/idempotency.service.js';
import { IdempotentConsumerInterceptor } from './idempotent-consumer.interceptor.js';
import { IdempotentConsumerHandler } from './idempotent-consumer.metadata.js';

class Handlers {
  @IdempotentConsumerHandler({ consumer: 'mailer', key: (data: { id: string }) => data.id })
  marked() {}
  unmarked() {}
}

const contextOf = (type: string, handler: () => void): ExecutionContext =>
  ({
    getType: () => type,
    getHandler: () => handler,
    getClass: () => Handlers,
    switchToRpc: () => ({ getData: () => ({ id: 'evt_1' }), getContext: () => ({}) }),
  }) as unknown as ExecutionContext;

describe('IdempotentConsumerInterceptor', () => {
  const requests: unknown[] = [];
  const run = async (request: unknown, fn: (ctx: unknown) => Promise<unknown>) => {
    requests.push(request);
    return { status: 'fresh', value: await fn({}) };
  };
  const interceptor = new IdempotentConsumerInterceptor({ run } as unknown as IdempotencyService, new Reflector());
  const next: CallHandler = { handle: () => of('handled') };

  beforeEach(() => {
    requests.length = 0;
  });

  it('lets HTTP and WebSocket handlers through untouched, marked or not', async () => {
    for (const type of ['http', 'ws']) {
      expect(await lastValueFrom(interceptor.intercept(contextOf(type, Handlers.prototype.marked), next))).toBe(
        'handled',
      );
    }
    expect(requests).toEqual([]);
  });

  it('lets unmarked rpc handlers through untouched', async () => {
    expect(await lastValueFrom(interceptor.intercept(contextOf('rpc', Handlers.prototype.unmarked), next))).toBe(
      'handled',
    );
    expect(requests).toEqual([]);
  });

  it('runs marked rpc handlers through run() with the consumer and the key of the message', async () => {
    expect(await lastValueFrom(interceptor.intercept(contextOf('rpc', Handlers.prototype.marked), next))).toBe(
      'handled',
    );
    expect(requests).toEqual([expect.objectContaining({ operation: 'mailer', key: 'evt_1' })]);
  });
});
