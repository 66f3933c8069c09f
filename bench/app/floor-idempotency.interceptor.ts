import { type CallHandler, type ExecutionContext, Injectable, type NestInterceptor } from '@nestjs/common';
import { REDIS_FAIL_FAST_OPTIONS } from 'nestjs-idempotency/redis';
import { Redis } from 'ioredis';
import type { ServerResponse } from 'node:http';
import { from, mergeMap, type Observable, of } from 'rxjs';

const LEASE_MS = 30_000;
const TTL_MS = 24 * 3_600_000;

/**
 * `floor-fresh` / `floor-replay`: the least an idempotency layer of this design can do, written by
 * hand as a lower bound for ours (bench/README.md). One round trip to claim or read
 * (`SET key "" NX PX … GET` answers the stored result, or claims), one to store
 * `JSON.stringify(result)`. No fingerprint, no fencing, no byte capture, no headers kept: it is
 * not safe, only fast. The Redis client is configured as `RedisIdempotencyStore` configures its
 * own, and its socket writes are coalesced per event-loop iteration the same way.
 */
@Injectable()
export class FloorIdempotencyInterceptor implements NestInterceptor {
  private readonly redis: Redis;
  private corked = false;

  constructor(
    redisUrl: string,
    private readonly prefix: string,
  ) {
    this.redis = new Redis(redisUrl, REDIS_FAIL_FAST_OPTIONS);
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const http = context.switchToHttp();
    const request = http.getRequest<{ headers: Record<string, string | undefined> }>();
    const response = http.getResponse<ServerResponse>();
    const key = `${this.prefix}:${request.headers['x-tenant-id']}:${request.headers['idempotency-key']}`;
    this.cork();
    return from(this.redis.set(key, '', 'PX', LEASE_MS, 'NX', 'GET')).pipe(
      mergeMap((stored) => {
        if (stored === null) {
          return next.handle().pipe(
            mergeMap(async (result: unknown) => {
              this.cork();
              await this.redis.set(key, JSON.stringify(result), 'PX', TTL_MS);
              return result;
            }),
          );
        }
        response.statusCode = 201;
        response.setHeader('content-type', 'application/json; charset=utf-8');
        response.end(stored);
        return of(undefined);
      }),
    );
  }

  /** One socket write per event-loop iteration, as the store does on a client it owns. */
  private cork(): void {
    if (this.corked || this.redis.status !== 'ready') return;
    this.corked = true;
    this.redis.stream.cork();
    setImmediate(() => {
      this.corked = false;
      this.redis.stream.uncork();
    });
  }
}
