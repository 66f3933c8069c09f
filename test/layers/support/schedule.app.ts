import {
  Body,
  Controller,
  HttpException,
  Injectable,
  Module,
  Post,
  RequestTimeoutException,
  Res,
  type CallHandler,
  type ExecutionContext,
  type INestApplication,
  type NestInterceptor,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from 'nestjs-idempotency';
import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { catchError, throwError, timeout, TimeoutError, type Observable } from 'rxjs';
import type { Platform } from './layers.app.js';

/** How the handler answers: its return (sync or after a pause), or through `@Res()` (in its flow, or from a client made at startup). */
export type AnswerMode = 'sync' | 'async' | 'callback' | 'startup-callback';

export interface ScheduleBody {
  tag: string;
  mode: AnswerMode;
  /** 201 succeeds (one business write), 402 is a stored decline, 503 is released. */
  status: 201 | 402 | 503;
  /** Pause before the handler answers, in ms (from its start). */
  answerMs: number;
}

/** Header: the outer `timeout()` of this request, in ms. */
export const OUTER_TIMEOUT_HEADER = 'x-outer-timeout';

/** What the handler runs did, by tag. */
export interface ScheduleTrace {
  runs: number;
  running: number;
  maxRunning: number;
  /** Statuses the runs answered, in order; a success made one business write. */
  answers: number[];
  writes: number;
  started: () => void;
}

@Injectable()
export class ScheduleProbe extends EventEmitter {
  readonly traces = new Map<string, ScheduleTrace>();

  trace(tag: string): ScheduleTrace {
    let trace = this.traces.get(tag);
    if (!trace) {
      trace = { runs: 0, running: 0, maxRunning: 0, answers: [], writes: 0, started: () => undefined };
      this.traces.set(tag, trace);
    }
    return trace;
  }
}

type HttpResponse = { raw?: ServerResponse } & Partial<ServerResponse>;

function begin(trace: ScheduleTrace): number {
  trace.runs += 1;
  trace.running += 1;
  trace.maxRunning = Math.max(trace.maxRunning, trace.running);
  return trace.runs;
}

function end(trace: ScheduleTrace, status: number): void {
  trace.running -= 1;
  trace.answers.push(status);
  if (status < 300) trace.writes += 1;
}

@Controller()
class ScheduleController {
  constructor(private readonly probe: ScheduleProbe) {}

  @Post('schedule/value')
  @Idempotent({ operation: 'schedule.value' })
  async value(@Body() body: ScheduleBody): Promise<unknown> {
    const trace = this.probe.trace(body.tag);
    const run = begin(trace);
    trace.started();
    if (body.mode === 'async' && run === 1) await sleep(body.answerMs);
    end(trace, body.status);
    if (body.status !== 201) throw new HttpException({ message: 'refused', tag: body.tag, run }, body.status);
    return { tag: body.tag, run };
  }

  @Post('schedule/res')
  @Idempotent({ operation: 'schedule.res' })
  res(@Body() body: ScheduleBody, @Res() res: HttpResponse): void {
    const trace = this.probe.trace(body.tag);
    const run = begin(trace);
    const answer = () => {
      end(trace, body.status);
      const raw = (res.raw ?? res) as ServerResponse;
      // An outer layer may have answered already: then this answer reaches nobody.
      if (raw.headersSent || raw.writableEnded) return;
      raw.statusCode = body.status;
      raw.setHeader('content-type', 'application/json');
      raw.end(JSON.stringify({ tag: body.tag, run, status: body.status }));
    };
    if (run > 1) return answer();
    if (body.mode === 'callback') setTimeout(answer, body.answerMs);
    // The test makes the client created at startup call back, from its own context.
    else this.probe.once(body.tag, answer);
    trace.started();
  }
}

/** The outer `timeout()` interceptor of the NestJS docs, with the request's own delay. */
class OuterTimeout implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const ms = Number(
      context.switchToHttp().getRequest<{ headers: Record<string, unknown> }>().headers[OUTER_TIMEOUT_HEADER],
    );
    if (!ms) return next.handle();
    return next.handle().pipe(
      timeout(ms),
      catchError((error) => throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error))),
    );
  }
}

/** A memory store whose every call takes `latency.ms` first (a slow or distant store). */
export class SlowMemoryStore extends MemoryIdempotencyStore {
  readonly latency = { ms: 0 };
}
for (const call of ['claim', 'get', 'complete', 'release', 'extend', 'takeOver', 'restore'] as const) {
  const original = MemoryIdempotencyStore.prototype[call] as (...args: unknown[]) => Promise<unknown>;
  (SlowMemoryStore.prototype as unknown as Record<string, unknown>)[call] = async function (
    this: SlowMemoryStore,
    ...args: unknown[]
  ) {
    if (this.latency.ms > 0) await sleep(this.latency.ms);
    return original.apply(this, args);
  };
}

export interface ScheduleApp {
  app: INestApplication;
  url: string;
  probe: ScheduleProbe;
  store: SlowMemoryStore;
}

export async function startScheduleApp(platform: Platform): Promise<ScheduleApp> {
  const store = new SlowMemoryStore();
  @Module({
    imports: [IdempotencyModule.forRoot({ store, tenant: () => 't', principal: () => 'u' })],
    controllers: [ScheduleController],
    providers: [ScheduleProbe],
  })
  class ScheduleModule {}
  const app =
    platform === 'express'
      ? await NestFactory.create(ScheduleModule, { rawBody: true, logger: false })
      : await NestFactory.create(ScheduleModule, new FastifyAdapter(), { rawBody: true, logger: false });
  app.useGlobalInterceptors(new OuterTimeout());
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return { app, url, probe: app.get(ScheduleProbe), store };
}
