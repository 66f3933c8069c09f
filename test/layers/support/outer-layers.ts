import {
  BadGatewayException,
  Catch,
  HttpException,
  InternalServerErrorException,
  RequestTimeoutException,
  type ArgumentsHost,
  type CallHandler,
  type ExceptionFilter,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import type { AbstractHttpAdapter } from '@nestjs/core';
import { IdempotencyProblemException } from 'nestjs-idempotency';
import { catchError, map, switchMap, throwError, timeout, TimeoutError, type Observable } from 'rxjs';

/** The request header that switches a layer on for the requests of one case. */
export const LAYER_HEADER = 'x-layer';

/**
 * The timeout interceptor of the NestJS docs ("Interceptors", "More operators"), with 300 ms.
 */
export class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(300),
      catchError((error) => throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error))),
    );
  }
}

/** Wraps every result as `{ data }`, as many APIs do (the naive form, without a sent-response check). */
export class WrapResultInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(map((data) => ({ data })));
  }
}

/**
 * Maps the application's errors to 502, as a gateway-style API does. The idempotency layer's own
 * problems pass through: they tell the client what to do with its key, and a user who maps them
 * away breaks the contract himself.
 */
export class MapErrorsToBadGatewayInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next
      .handle()
      .pipe(
        catchError((error) =>
          throwError(() => (error instanceof IdempotencyProblemException ? error : new BadGatewayException())),
        ),
      );
  }
}

/** An "audit" step after the handler succeeded, which fails: the client gets 500. */
export class FailingAuditInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      switchMap(async () => {
        throw new InternalServerErrorException('audit log unavailable');
      }),
    );
  }
}

/**
 * A global filter that hides error details: every `HttpException` becomes a bare 500. The
 * idempotency layer's problems never reach it (`@Idempotent()` binds its own filter to the
 * route, which takes precedence over global filters).
 */
@Catch(HttpException)
export class HttpErrorsAs500Filter implements ExceptionFilter {
  constructor(private readonly adapter: AbstractHttpAdapter) {}

  catch(_exception: HttpException, host: ArgumentsHost): void {
    this.adapter.reply(host.switchToHttp().getResponse(), { statusCode: 500, message: 'Internal server error' }, 500);
  }
}

/** A class of exceptions, as `@Catch()` lists them. */
export type ExceptionType = abstract new (...args: never[]) => unknown;

/** What the first request's client does, and when (the suite's three disconnects). */
export type ClientMove = 'leaves-before-handler' | 'leaves-during-handler' | 'leaves-after-handler';

/**
 * One outer layer of the matrix: something around an `@Idempotent()` route, registered globally
 * (outside the route's idempotency interceptor), or a client that leaves. To add one, add an
 * entry; the app registers its interceptor or filter and switches it on for the requests whose
 * `X-Layer` header names it.
 */
export interface OuterLayer {
  id: string;
  title: string;
  /** A global interceptor, on every request of the case (the first and its retries). */
  interceptor?: () => NestInterceptor;
  /** A global exception filter for the exceptions it catches, on every request of the case. */
  filter?: { catches: readonly ExceptionType[]; create: (adapter: AbstractHttpAdapter) => ExceptionFilter };
  /** What the client of the first request does. */
  client?: ClientMove;
  /**
   * The layer answers the client while the handler is still held: the test keeps the handler at
   * its gate until that answer arrives, then retries, so every handler outlives the layer.
   */
  answersFirst?: boolean;
  /**
   * JSON bodies a replayed success may carry besides the handler's own value. A layer that
   * renders the handler's success under the handler's own status (a wrapper, a serializer) has
   * its rendering stored: the bytes the client got, as the README says of replays.
   */
  successBodies?: (value: unknown) => unknown[];
  /** Same for a replayed 4xx: a layer that re-renders errors but keeps their status. */
  errorBodies?: () => unknown[];
}

export const OUTER_LAYERS: readonly OuterLayer[] = [
  {
    id: 'timeout',
    title: 'global TimeoutInterceptor (NestJS docs, 300 ms → 408)',
    interceptor: () => new TimeoutInterceptor(),
    answersFirst: true,
  },
  {
    id: 'wrap',
    title: 'global result-wrapping interceptor ({ data })',
    interceptor: () => new WrapResultInterceptor(),
    successBodies: (value) => [{ data: value }],
  },
  {
    id: 'map-errors',
    title: 'global error-mapping interceptor (→ 502)',
    interceptor: () => new MapErrorsToBadGatewayInterceptor(),
  },
  {
    id: 'audit-throws',
    title: 'global interceptor that throws after the handler succeeded (audit → 500)',
    interceptor: () => new FailingAuditInterceptor(),
  },
  {
    id: 'filter-500',
    title: 'global exception filter that rewrites every HttpException to 500',
    filter: { catches: [HttpException], create: (adapter) => new HttpErrorsAs500Filter(adapter) },
  },
  { id: 'leaves-before', title: 'client that leaves before the handler starts', client: 'leaves-before-handler' },
  { id: 'leaves-during', title: 'client that leaves while the handler runs', client: 'leaves-during-handler' },
  {
    id: 'leaves-after',
    title: 'client that leaves after the handler settled, before the answer',
    client: 'leaves-after-handler',
  },
];
