import {
  Body,
  Controller,
  HttpException,
  Injectable,
  Module,
  Post,
  Res,
  ServiceUnavailableException,
  UseInterceptors,
  type CallHandler,
  type ExecutionContext,
  type INestApplication,
  type NestInterceptor,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Idempotent, IdempotencyContext, IdempotencyContextRef, IdempotencyModule } from 'nestjs-idempotency';
import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { catchError, concatMap, map, of, retry, throwError, timeout, TimeoutError, type Observable } from 'rxjs';
import { RequestTimeoutException } from '@nestjs/common';
import type { LayerBackend } from './layer-backends.js';
import type { Platform } from './layers.app.js';

/** The body of every request of the events suite: one tag per case, and what the handler should do. */
export interface EventsBody {
  tag: string;
  /** The status the handler answers or throws (201 is a success). */
  status: number;
}

/** The header that switches an outer layer on for one request. */
export const OUTER_HEADER = 'x-outer';

/**
 * A client made at startup, as an RPC or bus client is: its callbacks run in its own async
 * context, never in a request's. The test makes it answer (`reply(tag, status)`).
 */
@Injectable()
export class StartupBus extends EventEmitter {
  reply(tag: string, status: number): void {
    this.emit(tag, status);
  }
}

/** Moments the test waits on, by tag: a gate the handler or a layer waits at, and counters. */
@Injectable()
export class EventsProbe {
  private readonly gates = new Map<string, { promise: Promise<void>; open: () => void }>();
  readonly runs = new Map<string, number>();
  readonly started = new Map<string, () => void>();

  gate(name: string): { promise: Promise<void>; open: () => void } {
    let gate = this.gates.get(name);
    if (!gate) {
      let open!: () => void;
      const promise = new Promise<void>((resolve) => (open = resolve));
      this.gates.set(name, (gate = { promise, open }));
    }
    return gate;
  }

  ran(tag: string): number {
    const runs = (this.runs.get(tag) ?? 0) + 1;
    this.runs.set(tag, runs);
    return runs;
  }

  openAll(): void {
    for (const gate of this.gates.values()) gate.open();
  }
}

type HttpResponse = { raw?: ServerResponse } & Partial<ServerResponse>;
const rawOf = (response: HttpResponse): ServerResponse => (response.raw ?? response) as ServerResponse;

function answer(response: HttpResponse, status: number, body: unknown): void {
  const raw = rawOf(response);
  raw.statusCode = status;
  raw.setHeader('content-type', 'application/json; charset=utf-8');
  raw.end(JSON.stringify(body));
}

function failure(status: number, tag: string): HttpException {
  return status >= 500
    ? new ServiceUnavailableException({ statusCode: status, message: 'provider unavailable', tag })
    : new HttpException({ statusCode: status, message: 'card declined', tag }, status);
}

/** An interceptor inside `@Idempotent()` that answers through `getResponse()` (a decline, before the handler). */
class DeclineInsideInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const { tag, status } = context.switchToHttp().getRequest<{ body: EventsBody }>().body;
    if (status === 201) return next.handle();
    answer(context.switchToHttp().getResponse<HttpResponse>(), status, { declined: true, tag });
    return of(undefined);
  }
}

function eventsController(backend: LayerBackend) {
  @Controller()
  class EventsController {
    constructor(
      private readonly bus: StartupBus,
      private readonly probe: EventsProbe,
    ) {}

    /** `@Res()`: answers when the startup bus calls back, after it returned; writes its business row then. */
    @Post('bus-callback')
    @Idempotent({ operation: 'events.bus', transactional: backend.transactional })
    busCallback(
      @Body() body: EventsBody,
      @Res() res: HttpResponse,
      @IdempotencyContext() idem: IdempotencyContextRef,
    ): void {
      const run = this.probe.ran(body.tag);
      this.bus.once(body.tag, (status: number) => {
        void (async () => {
          if (status < 300) await backend.write(idem, body.tag, run);
          answer(res, status, { tag: body.tag, run, status });
        })();
      });
      this.probe.started.get(body.tag)?.();
    }

    /** Returns or throws the asked status; its first run may wait at the tag's gate. */
    @Post('plain')
    @Idempotent({ operation: 'events.plain', transactional: backend.transactional })
    async plain(@Body() body: EventsBody, @IdempotencyContext() idem: IdempotencyContextRef): Promise<unknown> {
      const run = this.probe.ran(body.tag);
      this.probe.started.get(body.tag)?.();
      if (run === 1) await this.probe.gate(`handler:${body.tag}`).promise;
      if (body.status >= 300) throw failure(body.status, body.tag);
      await backend.write(idem, body.tag, run);
      return { tag: body.tag, run };
    }

    /** The same, with waiting duplicates and no key echo (docs/contract.md B.9 rule 26). */
    @Post('waiting')
    @Idempotent({
      operation: 'events.waiting',
      transactional: backend.transactional,
      echoKey: false,
      inProgress: { mode: 'wait', maxWaitMs: 20_000 },
    })
    async waiting(@Body() body: EventsBody, @IdempotencyContext() idem: IdempotencyContextRef): Promise<unknown> {
      return this.plain(body, idem);
    }

    /** An interceptor inside `@Idempotent()` answers for the handler through the response. */
    @Post('inner-answers')
    @UseInterceptors(DeclineInsideInterceptor)
    @Idempotent({ operation: 'events.inner', transactional: backend.transactional })
    async innerAnswers(@Body() body: EventsBody, @IdempotencyContext() idem: IdempotencyContextRef): Promise<unknown> {
      const run = this.probe.ran(body.tag);
      await backend.write(idem, body.tag, run);
      return { tag: body.tag, run };
    }
  }
  return EventsController;
}

/**
 * Outer layers, global (outside `@Idempotent()`), each switched on by `X-Outer`:
 * - `timeout`: RxJS `timeout(300)` → 408, as the NestJS docs write it;
 * - `slow-envelope`: wraps a success as `{ data }` once the tag's `envelope` gate opens (an awaited lookup);
 * - `retry`: RxJS `retry(2)` around the route.
 */
class OuterLayers implements NestInterceptor {
  constructor(private readonly probe: EventsProbe) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, unknown>; body: EventsBody }>();
    switch (request.headers[OUTER_HEADER]) {
      case 'timeout':
        return next.handle().pipe(
          timeout(300),
          catchError((error) =>
            throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
          ),
        );
      case 'slow-envelope':
        return next.handle().pipe(
          concatMap(async (data) => {
            await this.probe.gate(`envelope:${request.body.tag}`).promise;
            return data;
          }),
          map((data) => ({ data })),
        );
      case 'retry':
        return next.handle().pipe(retry(2));
      default:
        return next.handle();
    }
  }
}

export interface EventsApp {
  app: INestApplication;
  url: string;
  bus: StartupBus;
  probe: EventsProbe;
}

export async function startEventsApp(platform: Platform, backend: LayerBackend): Promise<EventsApp> {
  @Module({
    imports: [
      IdempotencyModule.forRoot({ ...backend.moduleOptions, tenant: () => 'tenant-events', principal: () => 'u' }),
    ],
    controllers: [eventsController(backend)],
    providers: [StartupBus, EventsProbe],
  })
  class EventsModule {}

  const app =
    platform === 'express'
      ? await NestFactory.create(EventsModule, { rawBody: true, logger: false })
      : await NestFactory.create(EventsModule, new FastifyAdapter(), { rawBody: true, logger: false });
  const probe = app.get(EventsProbe);
  app.useGlobalInterceptors(new OuterLayers(probe));
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return { app, url, bus: app.get(StartupBus), probe };
}
