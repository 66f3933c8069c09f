/**
 * An outer `timeout()` then `retry()` whose timeout fires while the claim is still being made (a
 * slow Redis): the re-subscription comes before any attempt of the request exists. It must not
 * pass through as if the interceptor were bound twice (the handler would run unprotected beside
 * the claim, and again once that claim's lease lapsed): it is answered 409, retryable, and the
 * handler runs once for the key. Express and Fastify, the real Redis behind a delaying TCP proxy.
 */
import {
  Body,
  Controller,
  Module,
  Post,
  type CallHandler,
  type INestApplication,
  type NestInterceptor,
} from '@nestjs/common';
import { APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { Redis } from 'ioredis';
import { randomUUID } from 'node:crypto';
import { retry, timeout, type Observable } from 'rxjs';
import { Idempotent, IdempotencyModule } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { send } from '../support/http/send.js';
import { startTcpProxy, type TcpProxy } from '../support/net/tcp-proxy.js';
import { connectRedisOrFail, deleteKeys, openRedis } from '../support/servers/redis.js';
import { sleep } from '../support/timing.js';

const CLAIM_DELAY_MS = 400;
const runs = new Map<string, number>();

/** Gives each attempt 150 ms, then subscribes once more: shorter than the claim through the proxy. */
class OuterTimeoutRetry implements NestInterceptor {
  intercept(_context: unknown, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(timeout(150), retry(1));
  }
}

@Controller()
class ChargesController {
  @Post('charges')
  @Idempotent()
  charge(@Body() body: { ref: string }) {
    runs.set(body.ref, (runs.get(body.ref) ?? 0) + 1);
    return { id: body.ref };
  }
}

describe.each(['express', 'fastify'] as const)('re-subscribed before the claim is made (%s)', (platform) => {
  const prefix = `resubscribed-before-claim:${platform}:${randomUUID()}:`;
  let proxy: TcpProxy;
  let redis: Redis;
  let admin: Redis;
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    await connectRedisOrFail();
    proxy = await startTcpProxy(6379);
    redis = await openRedis(`redis://127.0.0.1:${proxy.port}`);
    admin = await openRedis();
    @Module({
      imports: [
        IdempotencyModule.forRoot({
          store: new RedisIdempotencyStore(redis, { prefix }),
          tenant: () => 't',
          principal: () => 'u',
        }),
      ],
      controllers: [ChargesController],
      providers: [{ provide: APP_INTERCEPTOR, useClass: OuterTimeoutRetry }],
    })
    class AppModule {}
    app =
      platform === 'fastify'
        ? await NestFactory.create(AppModule, new FastifyAdapter(), { logger: false })
        : await NestFactory.create(AppModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  });
  afterAll(async () => {
    await app?.close();
    redis?.disconnect();
    await proxy?.close();
    if (admin) {
      await deleteKeys(admin, prefix);
      await admin.quit();
    }
  });

  it('the re-subscription is answered 409 (retryable) and the handler runs once for the key, the retries included', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    proxy.delay(CLAIM_DELAY_MS);
    const first = await send(url, '/charges', { key, body: { ref } });
    proxy.delay(0);
    expect(first.status).toBe(409);
    expect(first.headers.get('retry-after')).toBe('1');
    expect(runs.get(ref)).toBeUndefined();
    // The client retries until the key settles: its lease, unclaimed by any handler, lapses.
    let last = first;
    for (let attempt = 0; attempt < 100 && last.status === 409; attempt += 1) {
      await sleep(100);
      last = await send(url, '/charges', { key, body: { ref } });
    }
    expect(last.status).toBe(201);
    const again = await send(url, '/charges', { key, body: { ref } });
    expect({ status: again.status, replayed: again.headers.get('idempotent-replayed'), runs: runs.get(ref) }).toEqual({
      status: 201,
      replayed: 'true',
      runs: 1,
    });
  });
});
