/**
 * The record follows what the handler answered (docs/contract.md B.7 rule 17a) on the routes where
 * telling the handler's answer from an outer layer's is hardest: `@Res()` handlers that answer
 * from a callback after they returned, that write and then fail, passthrough handlers that write,
 * `@Redirect()`, exception filters that restyle a 4xx, outer interceptors that turn a failure
 * into a success, and a transactional `@Res()` handler that answers and then fails. Each case was
 * a finding of a hostile review; the two it found that remain limits (a timeout interceptor
 * inside `@Idempotent()`, a transactional `@Res()` handler that waits for its own answer to be
 * sent) are in docs/guarantees.md.
 */
import {
  ArgumentsHost,
  BadRequestException,
  Body,
  CallHandler,
  Catch,
  Controller,
  ExceptionFilter,
  ExecutionContext,
  Module,
  NestInterceptor,
  Post,
  Redirect,
  Res,
  UseFilters,
  UseInterceptors,
  type INestApplication,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { Response } from 'express';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { catchError, of, type Observable } from 'rxjs';
import type { DataSource, EntityManager } from 'typeorm';
import {
  Idempotent,
  IdempotencyContext,
  IdempotencyContextRef,
  IdempotencyModule,
  MemoryIdempotencyStore,
} from 'nestjs-idempotency';
import { TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { send } from '../support/http/send.js';
import { openIdempotencyDataSource } from '../support/servers/idempotency-data-source.js';
import { connectPostgresOrFail, createThrowawaySchema, dropSchema } from '../support/servers/postgres.js';

const probe = { running: 0, maxRunning: 0, runs: 0 };
const resetProbe = () => Object.assign(probe, { running: 0, maxRunning: 0, runs: 0 });

/** An envelope-style API: every error becomes `{ ok: false }` under the route's status. */
class ErrorsAsEnvelopeInterceptor implements NestInterceptor {
  intercept(_c: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(catchError(() => of({ ok: false, error: 'try again later' })));
  }
}

/** A problem+json filter that answers 422 for validation errors, as many APIs do. */
@Catch(BadRequestException)
class ValidationAs422Filter implements ExceptionFilter {
  catch(exception: BadRequestException, host: ArgumentsHost): void {
    host
      .switchToHttp()
      .getResponse<Response>()
      .status(422)
      .type('application/problem+json')
      .send(JSON.stringify({ type: 'about:blank', title: 'Unprocessable', status: 422, detail: exception.message }));
  }
}

@Controller()
class HandlerController {
  /** A callback-style `@Res()` handler: it answers once its work is done, after it returned. */
  @Post('late-write')
  @Idempotent()
  lateWrite(@Res() res: Response, @Body() body: { fail?: boolean }) {
    probe.runs += 1;
    setTimeout(() => {
      if (body.fail) res.status(500).json({ message: 'charge failed' });
      else res.status(200).json({ id: 'order_1' });
    }, 50);
  }

  /** A `@Res()` handler that answers, then a later step fails at once. */
  @Post('res-write-then-throw')
  @Idempotent()
  resWriteThenThrow(@Res() res: Response) {
    probe.runs += 1;
    res.status(201).json({ id: 'order_9', created: true });
    throw new Error('audit log unavailable');
  }

  @Post('redirect')
  @Idempotent()
  @Redirect('/fallback', 303)
  redirect() {
    probe.runs += 1;
    return { url: '/orders/42' };
  }

  /** Passthrough, but the handler answers itself (Express `res.json`). */
  @Post('passthrough-writes')
  @Idempotent()
  passthroughWrites(@Res({ passthrough: true }) res: Response) {
    probe.runs += 1;
    res.status(200).json({ id: 'order_7' });
  }
}

/** Controller-level layers are outside the method-level `@Idempotent()`. */
@Controller()
@UseInterceptors(ErrorsAsEnvelopeInterceptor)
class EnvelopeController {
  @Post('envelope')
  @Idempotent()
  envelope() {
    probe.runs += 1;
    throw new Error('payment provider timed out'); // a 500: released by the default policy
  }
}

@Controller()
@UseFilters(ValidationAs422Filter)
class ValidationController {
  @Post('validation')
  @Idempotent()
  validation() {
    probe.runs += 1;
    throw new BadRequestException('amount must be positive');
  }
}

const resolvers = { tenant: () => 't', principal: () => 'u' };

async function listen(app: INestApplication): Promise<string> {
  await app.listen(0, '127.0.0.1');
  return (await app.getUrl()).replace('[::1]', '127.0.0.1');
}

describe("the handler's own answer: memory store, Express", () => {
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), ...resolvers })],
      controllers: [HandlerController, EnvelopeController, ValidationController],
    })
    class ReviewModule {}
    app = await NestFactory.create(ReviewModule, { rawBody: true, logger: false });
    url = await listen(app);
  });
  afterAll(async () => app?.close());
  beforeEach(resetProbe);

  it('a @Res() handler that answers 500 after it returned is not recorded as a success', async () => {
    const key = randomUUID();
    const first = await send(url, '/late-write', { key, body: { fail: true } });
    expect(first.status).toBe(500);
    const retry = await send(url, '/late-write', { key, body: { fail: true } });
    expect({ status: retry.status, replayed: retry.headers.get('idempotent-replayed') }).toEqual({
      status: 500,
      replayed: null,
    });
  });

  it('a @Res() handler that answers 200 after it returned has that answer replayed', async () => {
    const key = randomUUID();
    const first = await send(url, '/late-write', { key, body: {} });
    const retry = await send(url, '/late-write', { key, body: {} });
    expect({ status: retry.status, body: retry.text }).toEqual({ status: first.status, body: first.text });
  });

  it('a @Res() answer is sent as the handler wrote it, and replayed as sent', async () => {
    const key = randomUUID();
    // Without the library the client gets a clean 201 (Nest's filter sees the headers sent and only ends).
    const first = await send(url, '/res-write-then-throw', { key }).then(
      (r) => `${r.status} ${r.text}`,
      (e: Error) => `transport error: ${e.message} (${String((e.cause as Error | undefined)?.message)})`,
    );
    const retry = await send(url, '/res-write-then-throw', { key });
    expect({ first }).toEqual({ first: `${retry.status} ${retry.text}` });
  });

  it('@Redirect(): the retry replays the redirect', async () => {
    const key = randomUUID();
    const first = await fetch(`${url}/redirect`, {
      method: 'POST',
      headers: { 'Idempotency-Key': key },
      redirect: 'manual',
    });
    const retry = await fetch(`${url}/redirect`, {
      method: 'POST',
      headers: { 'Idempotency-Key': key },
      redirect: 'manual',
    });
    const view = async (r: globalThis.Response) => ({
      status: r.status,
      location: r.headers.get('location'),
      body: await r.text(),
    });
    const [a, b] = [await view(first), await view(retry)];
    expect({ status: b.status, location: b.location }).toEqual({ status: a.status, location: a.location });
  });

  it('@Res({ passthrough: true }) handler that writes: the retry replays what it wrote', async () => {
    const key = randomUUID();
    const first = await send(url, '/passthrough-writes', { key });
    await sleep(50);
    const retry = await send(url, '/passthrough-writes', { key });
    expect({ status: retry.status, body: retry.text }).toEqual({ status: first.status, body: first.text });
  });

  it('a handler failure (500) that an outer interceptor renders as a success does not burn the key', async () => {
    const key = randomUUID();
    const first = await send(url, '/envelope', { key });
    expect(first.json()).toEqual({ ok: false, error: 'try again later' });
    const retry = await send(url, '/envelope', { key });
    // The handler failed with a 500, released by the policy: the retry must run it again.
    expect({ replayed: retry.headers.get('idempotent-replayed'), runs: probe.runs }).toEqual({
      replayed: null,
      runs: 2,
    });
  });

  it("a 4xx as the route's exception filter renders it is what the retry replays", async () => {
    const key = randomUUID();
    const first = await send(url, '/validation', { key });
    expect(first.status).toBe(422);
    const retry = await send(url, '/validation', { key });
    expect({ status: retry.status, type: retry.headers.get('content-type'), body: retry.text }).toEqual({
      status: first.status,
      type: first.headers.get('content-type'),
      body: first.text,
    });
  });
});

describe("the handler's own answer: @Redirect() on Fastify", () => {
  let app: INestApplication;
  let url: string;
  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), ...resolvers })],
      controllers: [HandlerController],
    })
    class ReviewFastifyModule {}
    app = await NestFactory.create(ReviewFastifyModule, new FastifyAdapter(), { rawBody: true, logger: false });
    url = await listen(app);
  });
  afterAll(async () => app?.close());

  it('the retry replays the redirect', async () => {
    const key = randomUUID();
    const opts = { method: 'POST', headers: { 'Idempotency-Key': key }, redirect: 'manual' as const };
    const first = await fetch(`${url}/redirect`, opts);
    const retry = await fetch(`${url}/redirect`, opts);
    const b = { status: retry.status, location: retry.headers.get('location'), body: await retry.text() };
    expect({ status: b.status, location: b.location }).toEqual({
      status: first.status,
      location: first.headers.get('location'),
    });
  });
});

describe("the handler's own answer: transactional routes on PostgreSQL, Express", () => {
  let schema: string;
  let dataSource: DataSource;
  let app: INestApplication;
  let url: string;
  const gates = new Map<string, () => void>();

  const effects = async (ref: string) =>
    Number((await dataSource.query('SELECT count(*) AS n FROM review_effects WHERE ref = $1', [ref]))[0].n);

  @Controller()
  class TransactionalController {
    /** Writes its answer, then a later step fails (an audit call, a notification). */
    @Post('tx-write-then-throw')
    @Idempotent({ transactional: true })
    async writeThenThrow(
      @Res() res: Response,
      @Body() body: { ref: string },
      @IdempotencyContext() idem: IdempotencyContextRef,
    ) {
      await idem.getManager<EntityManager>().query('INSERT INTO review_effects (ref) VALUES ($1)', [body.ref]);
      res.status(201).json({ id: body.ref, created: true });
      await sleep(20);
      throw new Error('audit log unavailable');
    }
  }

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    schema = await createThrowawaySchema('review17a');
    dataSource = await openIdempotencyDataSource(schema);
    await dataSource.query('CREATE TABLE review_effects (ref text NOT NULL)');
    @Module({
      imports: [
        IdempotencyModule.forRoot({
          store: new MemoryIdempotencyStore(),
          durableStore: new TypeOrmIdempotencyStore(dataSource),
          ...resolvers,
        }),
      ],
      controllers: [TransactionalController],
    })
    class ReviewTxModule {}
    app = await NestFactory.create(ReviewTxModule, { rawBody: true, logger: false });
    url = await listen(app);
  });
  afterAll(async () => {
    for (const open of gates.values()) open();
    await sleep(200);
    await app?.close();
    await dataSource?.destroy();
    if (schema) await dropSchema(schema);
  });

  it('a @Res() answer of success is never sent for writes that were rolled back', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const first = await send(url, '/tx-write-then-throw', { key, body: { ref } }).catch((e: Error) => e);
    const retry = await send(url, '/tx-write-then-throw', { key, body: { ref } }).catch((e: Error) => e);
    const view = (r: Awaited<ReturnType<typeof send>> | Error) =>
      r instanceof Error
        ? `error: ${r.message}`
        : `${r.status} ${r.headers.get('idempotent-replayed') ?? '-'} ${r.text}`;
    const committed = await effects(ref);
    // Committed ⇔ completed: a replayed success needs the business write. And the first answer is
    // one whole response (its status and its own body), whatever it is.
    const replayedSuccess =
      !(retry instanceof Error) && retry.status < 300 && retry.headers.get('idempotent-replayed') === 'true';
    const firstWhole =
      !(first instanceof Error) &&
      (() => {
        try {
          JSON.parse(first.text);
          return true;
        } catch {
          return false;
        }
      })();
    expect({ first: view(first), firstWhole, retry: view(retry), committed }).toEqual({
      first: expect.any(String),
      firstWhole: true,
      retry: expect.any(String),
      committed: replayedSuccess ? 1 : 0,
    });
  });
});
