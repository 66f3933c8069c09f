/**
 * Review of the claimed request as one object (issue 31): the handler's own write and the end of
 * its run in the same turn, an outer `retry()` around a handler that answers itself and then
 * fails, and a client that hangs up while a transactional handler is still at work. On Express
 * and Fastify, with a transactional route on PostgreSQL (committed ⇔ completed) and a plain one.
 */
import {
  Body,
  Controller,
  Module,
  Post,
  Res,
  type CallHandler,
  type ExecutionContext,
  type INestApplication,
  type NestInterceptor,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { randomUUID } from 'node:crypto';
import { retry, timeout, type Observable } from 'rxjs';
import type { DataSource, EntityManager } from 'typeorm';
import {
  Idempotent,
  IdempotencyContext,
  IdempotencyContextRef,
  IdempotencyModule,
  MemoryIdempotencyStore,
} from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { send, type HttpResult } from '../support/http/send.js';
import { openIdempotencyDataSource } from '../support/servers/idempotency-data-source.js';
import { connectPostgresOrFail, createThrowawaySchema, dropSchema } from '../support/servers/postgres.js';
import { connectRedisOrFail, deleteKeys, openRedis, redisUrl } from '../support/servers/redis.js';
import { sleep } from '../support/timing.js';

type Platform = 'express' | 'fastify';
/** Express `Response` or Fastify `FastifyReply`: both answer with `status(...)` then `json`/`send`. */
type AnyReply = { status(code: number): AnyReply; json?(body: unknown): void; send(body?: unknown): void };
const answer = (res: AnyReply, status: number, body: unknown) => {
  const replied = res.status(status);
  if (replied.json) replied.json(body);
  else replied.send(body);
};

interface Body_ {
  ref: string;
}

const runs = new Map<string, number>();
const ran = (ref: string) => runs.set(ref, (runs.get(ref) ?? 0) + 1).get(ref)!;
const gates = new Map<string, { promise: Promise<void>; open: () => void }>();
function gate(ref: string) {
  let entry = gates.get(ref);
  if (!entry) {
    let open!: () => void;
    const promise = new Promise<void>((resolve) => (open = resolve));
    gates.set(ref, (entry = { promise, open }));
  }
  return entry;
}
const started = new Map<string, () => void>();

/**
 * Outside `@Idempotent()`, by `x-outer`: `retry` is RxJS `retry(2)`; `timeout-retry` gives each
 * attempt 300 ms and subscribes again once (`timeout()` drops the attempt it gives up on).
 */
class OuterRetry implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, unknown> }>();
    switch (request.headers['x-outer']) {
      case 'retry':
        return next.handle().pipe(retry(2));
      case 'timeout-retry':
        return next.handle().pipe(timeout(300), retry(1));
      default:
        return next.handle();
    }
  }
}

const insert = (idem: IdempotencyContextRef, ref: string) =>
  idem.getManager<EntityManager>().query('INSERT INTO review_claimed_effects (ref) VALUES ($1)', [ref]);

@Controller()
class ReviewController {
  /** Writes its business row and its answer, and fails in the same synchronous turn. */
  @Post('tx/write-then-throw')
  @Idempotent({ transactional: true })
  async txWriteThenThrow(@Res() res: AnyReply, @Body() body: Body_, @IdempotencyContext() idem: IdempotencyContextRef) {
    ran(body.ref);
    await insert(idem, body.ref);
    answer(res, 201, { id: body.ref, created: true });
    throw new Error('audit log unavailable');
  }

  /** The same, failing one microtask after its write. */
  @Post('tx/write-then-reject')
  @Idempotent({ transactional: true })
  async txWriteThenReject(
    @Res() res: AnyReply,
    @Body() body: Body_,
    @IdempotencyContext() idem: IdempotencyContextRef,
  ) {
    ran(body.ref);
    await insert(idem, body.ref);
    answer(res, 201, { id: body.ref, created: true });
    await Promise.resolve();
    throw new Error('audit log unavailable');
  }

  /** Waits at its gate after its row (the client may hang up meanwhile), then succeeds or fails. */
  @Post('tx/gated')
  @Idempotent({ transactional: true })
  async txGated(@Body() body: Body_ & { fail?: boolean }, @IdempotencyContext() idem: IdempotencyContextRef) {
    ran(body.ref);
    await insert(idem, body.ref);
    started.get(body.ref)?.();
    await gate(body.ref).promise;
    if (body.fail) throw new Error('provider exploded');
    return { id: body.ref };
  }

  /** Not transactional: works 1 s, then succeeds. */
  @Post('plain/slow')
  @Idempotent()
  async plainSlow(@Body() body: Body_) {
    const run = ran(body.ref);
    await sleep(1_000);
    return { id: body.ref, run };
  }

  /** Not transactional: answers itself, then fails in the same turn. */
  @Post('plain/write-then-throw')
  @Idempotent()
  plainWriteThenThrow(@Res() res: AnyReply, @Body() body: Body_) {
    const run = ran(body.ref);
    answer(res, 201, { id: body.ref, run });
    throw new Error('audit log unavailable');
  }
}

/** A throwaway schema with the idempotency table and the business table the handlers write. */
async function openEffects(prefix: string) {
  await (await connectPostgresOrFail()).end();
  const schema = await createThrowawaySchema(prefix);
  const dataSource = await openIdempotencyDataSource(schema);
  await dataSource.query('CREATE TABLE review_claimed_effects (ref text NOT NULL)');
  const committed = async (ref: string) =>
    Number((await dataSource.query('SELECT count(*) AS n FROM review_claimed_effects WHERE ref = $1', [ref]))[0].n);
  return { schema, dataSource, committed };
}

describe.each<Platform>(['express', 'fastify'])('claimed request review (%s)', (platform) => {
  const prefix = `idem-review-claimed-${platform}-${randomUUID().slice(0, 8)}`;
  let schema: string;
  let dataSource: DataSource;
  let app: INestApplication;
  let url: string;

  let committed: (ref: string) => Promise<number>;
  const view = (r: HttpResult | Error) =>
    r instanceof Error ? `error ${r.message}` : `${r.headers.get('idempotent-replayed') ? 'replay ' : ''}${r.status}`;

  beforeAll(async () => {
    await connectRedisOrFail();
    ({ schema, dataSource, committed } = await openEffects('review_claimed'));
    @Module({
      imports: [
        IdempotencyModule.forRoot({
          store: new RedisIdempotencyStore(redisUrl(), { prefix }),
          durableStore: new TypeOrmIdempotencyStore(dataSource),
          tenant: () => 't',
          principal: () => 'u',
        }),
      ],
      controllers: [ReviewController],
    })
    class ReviewModule {}
    app =
      platform === 'express'
        ? await NestFactory.create(ReviewModule, { rawBody: true, logger: false })
        : await NestFactory.create(ReviewModule, new FastifyAdapter(), { rawBody: true, logger: false });
    app.useGlobalInterceptors(new OuterRetry());
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  });
  afterAll(async () => {
    for (const entry of gates.values()) entry.open();
    await sleep(200);
    await app?.close();
    await dataSource?.destroy();
    if (schema) await dropSchema(schema);
    const redis = await openRedis();
    await deleteKeys(redis, prefix);
    await redis.quit();
  });

  /** Retries until the key is no longer in progress (409), as a client would. */
  async function retryOnceSettled(path: string, key: string, body: unknown, headers?: Record<string, string>) {
    for (;;) {
      const result = await send(url, path, { key, body, headers });
      if (result.status !== 409) return result;
      await sleep(50);
    }
  }

  describe.each([
    ['write, then throw in the same turn', '/tx/write-then-throw'],
    ['write, then reject a microtask later', '/tx/write-then-reject'],
  ])('transactional @Res() handler: %s', (_, path) => {
    it.each([[undefined], ['retry']])(
      'no success is sent or replayed for rolled-back writes (outer layer: %s)',
      async (outer) => {
        const ref = randomUUID();
        const key = randomUUID();
        const headers = outer ? { 'x-outer': outer } : undefined;
        const first = await send(url, path, { key, body: { ref }, headers }).catch((e: Error) => e);
        const retried = await retryOnceSettled(path, key, { ref });
        const rows = await committed(ref);
        const firstSawSuccess = !(first instanceof Error) && first.status < 300;
        const replayedSuccess = retried.status < 300 && retried.headers.get('idempotent-replayed') === 'true';
        // Committed ⇔ completed with the success; the client never saw a success that did not commit.
        expect({ first: view(first), retry: view(retried), rows, firstSawSuccess }).toEqual({
          first: view(first),
          retry: view(retried),
          rows: replayedSuccess ? 1 : 0,
          firstSawSuccess: rows > 0 && replayedSuccess,
        });
      },
    );
  });

  it('a plain @Res() handler that answers then fails, under an outer retry(): one run, its answer replayed', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const first = await send(url, '/plain/write-then-throw', { key, body: { ref }, headers: { 'x-outer': 'retry' } });
    const replay = await retryOnceSettled('/plain/write-then-throw', key, { ref });
    expect({
      first: `${first.status} ${first.text}`,
      replay: `${replay.status} ${replay.text}`,
      runs: runs.get(ref),
    }).toEqual({
      first: `201 ${JSON.stringify({ id: ref, run: 1 })}`,
      replay: `201 ${JSON.stringify({ id: ref, run: 1 })}`,
      runs: 1,
    });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
  });

  it('an outer timeout() then retry(): the attempt timeout() dropped is not run again beside itself', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const first = await send(url, '/plain/slow', { key, body: { ref }, headers: { 'x-outer': 'timeout-retry' } });
    const retried = await retryOnceSettled('/plain/slow', key, { ref });
    // The handler runs once for the key; the client's own retry gets its success.
    expect({ runs: runs.get(ref), retry: `${view(retried)} ${retried.text}` }).toEqual({
      runs: 1,
      retry: `replay 201 ${JSON.stringify({ id: ref, run: 1 })}`,
    });
    expect(first.status).toBeGreaterThanOrEqual(200);
  });

  it.each([
    ['succeeds', false],
    ['fails', true],
  ])('a client that hangs up while the transactional handler works; the handler then %s', async (_, fail) => {
    const ref = randomUUID();
    const key = randomUUID();
    const body = { ref, fail };
    const isRunning = new Promise<void>((resolve) => started.set(ref, resolve));
    const aborter = new AbortController();
    const first = fetch(`${url}/tx/gated`, {
      method: 'POST',
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: aborter.signal,
    }).catch((e: Error) => e);
    await isRunning;
    aborter.abort();
    expect(await first).toHaveProperty('name', 'AbortError');
    // While it runs: in progress, and nobody runs it again.
    const during = await send(url, '/tx/gated', { key, body });
    gate(ref).open();
    const retried = await retryOnceSettled('/tx/gated', key, body);
    const rows = await committed(ref);
    expect({ during: during.status, retry: view(retried), rows, runs: runs.get(ref) }).toEqual(
      fail ? { during: 409, retry: '500', rows: 0, runs: 2 } : { during: 409, retry: 'replay 201', rows: 1, runs: 1 },
    );
  });
});

/**
 * Fastify with an asynchronous `onSend` hook (as @fastify/compress or @fastify/etag add): a
 * handler's `reply.send()` reaches the response only after the hook, so a handler that answers
 * and then fails has failed before its own answer is written.
 */
describe('claimed request review: Fastify with an async onSend hook', () => {
  let schema: string;
  let dataSource: DataSource;
  let app: INestApplication;
  let url: string;
  let committed: (ref: string) => Promise<number>;

  beforeAll(async () => {
    ({ schema, dataSource, committed } = await openEffects('review_claimed_hook'));
    @Module({
      imports: [
        IdempotencyModule.forRoot({
          store: new MemoryIdempotencyStore(),
          durableStore: new TypeOrmIdempotencyStore(dataSource),
          tenant: () => 't',
          principal: () => 'u',
        }),
      ],
      controllers: [ReviewController],
    })
    class HookModule {}
    const adapter = new FastifyAdapter();
    adapter.getInstance().addHook('onSend', async (_request, _reply, payload) => {
      await new Promise((resolve) => setImmediate(resolve));
      return payload;
    });
    app = await NestFactory.create(HookModule, adapter, { rawBody: true, logger: false });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  });
  afterAll(async () => {
    await app?.close();
    await dataSource?.destroy();
    if (schema) await dropSchema(schema);
  });

  it('a transactional @Res() handler that answers then fails: no success is sent for rolled-back writes', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const first = await send(url, '/tx/write-then-throw', { key, body: { ref } });
    let retried = await send(url, '/tx/write-then-throw', { key, body: { ref } });
    while (retried.status === 409) retried = await send(url, '/tx/write-then-throw', { key, body: { ref } });
    const rows = await committed(ref);
    expect({ first: `${first.status} ${first.text}`, rows }).toEqual({
      first: rows > 0 ? expect.stringMatching(/^201 /) : expect.not.stringMatching(/^2/),
      rows,
    });
  });
});
