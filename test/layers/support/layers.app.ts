import {
  Body,
  Catch,
  Controller,
  Module,
  Post,
  Res,
  type ArgumentsHost,
  type CallHandler,
  type ExceptionFilter,
  type ExecutionContext,
  type INestApplication,
  type NestInterceptor,
} from '@nestjs/common';
import { BaseExceptionFilter, NestFactory, type AbstractHttpAdapter } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Idempotent, IdempotencyContext, IdempotencyContextRef, IdempotencyModule } from 'nestjs-idempotency';
import type { ServerResponse } from 'node:http';
import { catchError, concatMap, from, switchMap, throwError, type Observable } from 'rxjs';
import { handlerBehaviour } from './handler-behaviours.js';
import type { LayerBackend } from './layer-backends.js';
import { LayerProbe } from './layer-probe.js';
import { LAYER_HEADER, type ExceptionType, type OuterLayer } from './outer-layers.js';

export type Platform = 'express' | 'fastify';

/** The route under test, and what it answers on success. */
export const ROUTE = '/layers';
export const SUCCESS_STATUS = 201;

/** The header that tells the app when the first request's client leaves (set on that request only). */
export const CLIENT_LEAVES_HEADER = 'x-client-leaves';

/** The body of every request of the matrix. */
export interface LayerRequestBody {
  /** One tag per case: the probe's key for what the app reports. */
  tag: string;
  /** A {@link HANDLER_BEHAVIOURS} id. */
  behaviour: string;
}

type HttpRequest = { headers: Record<string, string | string[] | undefined>; body?: Partial<LayerRequestBody> };
type HttpResponse = {
  raw?: ServerResponse;
  header?: (name: string, value: string) => unknown;
} & Partial<ServerResponse>;

const rawOf = (response: HttpResponse): ServerResponse => (response.raw ?? response) as ServerResponse;

/**
 * The route: reports its moments to the probe, makes its business write, waits at the gate on
 * its first run, then acts as the request's behaviour says. `@Idempotent()` is its only
 * idempotency layer; everything else around it is global.
 */
function layersController(backend: LayerBackend) {
  @Controller()
  class LayersController {
    constructor(private readonly probe: LayerProbe) {}

    @Post(ROUTE)
    @Idempotent({ operation: 'layers.run', transactional: backend.transactional })
    async run(
      @Body() body: LayerRequestBody,
      @Res({ passthrough: true }) response: HttpResponse,
      @IdempotencyContext() idem: IdempotencyContextRef,
    ): Promise<unknown> {
      const trace = this.probe.trace(body.tag);
      const first = !trace.started.fired;
      const run = (trace.runs += 1);
      trace.running += 1;
      trace.maxRunning = Math.max(trace.maxRunning, trace.running);
      if (first) {
        trace.recordId = idem.keyHash;
        trace.watchClient(rawOf(response));
        trace.started.fire();
      }
      const headers = new Map<string, string>();
      const info = {
        tag: body.tag,
        run,
        setHeader: (name: string, value: string) => {
          setHeader(response, name, value);
          headers.set(name.toLowerCase(), value);
        },
      };
      const behaviour = handlerBehaviour(body.behaviour);
      try {
        behaviour.before?.(info);
        if (backend.transactional) await backend.write(idem, body.tag, run);
        if (first) await trace.gate.promise;
        const value = await behaviour.act(info);
        if (!backend.transactional) await backend.write(idem, body.tag, run);
        trace.settle({ ok: true, value, location: headers.get('location') }, first);
        return value;
      } catch (error) {
        trace.settle({ ok: false, error }, first);
        throw error;
      } finally {
        trace.running -= 1;
        if (first) trace.settled.fire();
      }
    }
  }
  return LayersController;
}

function setHeader(response: HttpResponse, name: string, value: string): void {
  if (response.raw && typeof response.header === 'function') response.header(name, value);
  else response.setHeader!(name, value);
}

function requestOf(context: ExecutionContext): HttpRequest {
  return context.switchToHttp().getRequest<HttpRequest>();
}

function namesLayer(request: HttpRequest, layer: OuterLayer): boolean {
  return request.headers[LAYER_HEADER] === layer.id;
}

/** A layer's interceptor, switched on for the requests that name the layer. */
class OnlyForLayer implements NestInterceptor {
  constructor(
    private readonly layer: OuterLayer,
    private readonly inner: NestInterceptor,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> | Promise<Observable<unknown>> {
    return namesLayer(requestOf(context), this.layer) ? this.inner.intercept(context, next) : next.handle();
  }
}

/** The layers' exception filters, each for the requests that name its layer; Nest's default rendering otherwise. */
@Catch()
class LayerFilters extends BaseExceptionFilter {
  private readonly filters: { layer: OuterLayer; catches: readonly ExceptionType[]; filter: ExceptionFilter }[];

  constructor(adapter: AbstractHttpAdapter, layers: readonly OuterLayer[]) {
    super(adapter);
    this.filters = layers.flatMap((layer) =>
      layer.filter ? [{ layer, catches: layer.filter.catches, filter: layer.filter.create(adapter) }] : [],
    );
  }

  override catch(exception: unknown, host: ArgumentsHost): void {
    const request = host.switchToHttp().getRequest<HttpRequest>();
    const own = this.filters.find(
      ({ layer, catches }) => namesLayer(request, layer) && catches.some((type) => exception instanceof type),
    );
    if (own) own.filter.catch(exception, host);
    else super.catch(exception, host);
  }
}

/**
 * Test machinery, not a layer under test: on the first request of a "client leaves" case, holds
 * the request until its client has left, before the route (`before`: the claim and the handler
 * run with the client gone) or after the handler settled (`after`: nothing is written before the
 * client has gone).
 */
class HoldUntilClientLeaves implements NestInterceptor {
  constructor(private readonly probe: LayerProbe) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const request = requestOf(context);
    const when = request.headers[CLIENT_LEAVES_HEADER];
    if (when !== 'before' && when !== 'after') return next.handle();
    const trace = this.probe.trace(String(request.body?.tag));
    trace.watchClient(rawOf(context.switchToHttp().getResponse<HttpResponse>()));
    const gone = trace.clientGone.promise;
    if (when === 'before') {
      trace.arrived.fire();
      return from(gone).pipe(switchMap(() => next.handle()));
    }
    return next.handle().pipe(
      concatMap((value) => gone.then(() => value)),
      catchError((error) => from(gone).pipe(switchMap(() => throwError(() => error)))),
    );
  }
}

export interface LayersApp {
  app: INestApplication;
  url: string;
  probe: LayerProbe;
}

/**
 * The matrix app for one platform and backend, on a real socket: the route, every layer of
 * `layers` registered globally (each switched on by `X-Layer`), and the hold for leaving clients.
 */
export async function startLayersApp(
  platform: Platform,
  backend: LayerBackend,
  layers: readonly OuterLayer[],
): Promise<LayersApp> {
  @Module({
    imports: [
      IdempotencyModule.forRoot({
        ...backend.moduleOptions,
        tenant: () => 'tenant-layers',
        principal: () => 'user-layers',
      }),
    ],
    controllers: [layersController(backend)],
    providers: [LayerProbe],
  })
  class LayersModule {}

  const app =
    platform === 'express'
      ? await NestFactory.create(LayersModule, { rawBody: true, logger: false })
      : await NestFactory.create(LayersModule, new FastifyAdapter(), { rawBody: true, logger: false });
  const probe = app.get(LayerProbe);
  app.useGlobalInterceptors(
    new HoldUntilClientLeaves(probe),
    ...layers.flatMap((layer) => (layer.interceptor ? [new OnlyForLayer(layer, layer.interceptor())] : [])),
  );
  app.useGlobalFilters(new LayerFilters(app.getHttpAdapter() as AbstractHttpAdapter, layers));
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return { app, url, probe };
}
