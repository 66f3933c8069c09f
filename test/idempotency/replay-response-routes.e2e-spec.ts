import {
  Controller,
  HttpException,
  Injectable,
  Module,
  Post,
  Res,
  type CallHandler,
  type ExecutionContext,
  type INestApplication,
  type LoggerService,
  type LogLevel,
  type NestInterceptor,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { Server, ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import { map } from 'rxjs';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from 'nestjs-idempotency';
import { send } from '../support/http/send.js';
import { RecordingLogger } from '../support/recording-logger.js';

/** A status set through the response object, so it differs from the route's default (201). */
type StatusSink = { status?: (code: number) => unknown; code?: (code: number) => unknown };
const setStatus = (res: StatusSink, code: number) => (res.code ? res.code(code) : res.status!(code));

@Controller()
class AcceptedController {
  runs = 0;

  @Post('passthrough')
  @Idempotent({ scope: ['operation'] })
  passthrough(@Res({ passthrough: true }) res: StatusSink) {
    setStatus(res, 202);
    return { runs: ++this.runs };
  }

  /** No response object: the stored answer is a 422 the route threw, where Nest's default is 201. */
  @Post('plain')
  @Idempotent({ scope: ['operation'] })
  plain() {
    throw new HttpException({ message: 'declined', runs: ++this.runs }, 422);
  }

  @Post('wrapped')
  @Idempotent({ scope: ['operation'] })
  wrapped() {
    return { runs: ++this.runs };
  }

  @Post('own-response')
  @Idempotent({ scope: ['operation'] })
  ownResponse(@Res() res: StatusSink & { send: (body: unknown) => unknown; json?: (body: unknown) => unknown }) {
    setStatus(res, 202);
    const body = { runs: ++this.runs };
    return res.json ? res.json(body) : res.send(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })],
  controllers: [AcceptedController],
})
class ReplayRoutesModule {}

type Platform = 'express' | 'fastify';

/** The test app on `platform`, created but not listening (listeners and interceptors go on first). */
function createApp(platform: Platform, logger: LoggerService | LogLevel[] | false): Promise<INestApplication> {
  return platform === 'express'
    ? NestFactory.create(ReplayRoutesModule, { rawBody: true, logger })
    : NestFactory.create(ReplayRoutesModule, new FastifyAdapter(), { rawBody: true, logger });
}

/** Listens on a free loopback port and returns the base URL. */
async function listen(app: INestApplication): Promise<string> {
  await app.listen(0, '127.0.0.1');
  return (await app.getUrl()).replace('[::1]', '127.0.0.1');
}

/**
 * A replay is written to the response directly, whatever the route takes: it goes out once, with
 * the stored status, on a route without the response object, one that takes it with passthrough
 * (Nest sends the result) and one that sends itself. The status that `finish` listeners (access
 * logs, HTTP metrics) read is the one the client got, and Nest adds nothing after it.
 */
describe.each<Platform>(['express', 'fastify'])('Replays on routes that take the response (%s)', (platform) => {
  let app: INestApplication;
  let url: string;
  const finished: { path: string; response: ServerResponse }[] = [];

  beforeAll(async () => {
    app = await createApp(platform, ['error', 'warn']);
    await app.init();
    (app.getHttpServer() as Server).prependListener('request', (req, res: ServerResponse) =>
      res.once('finish', () => finished.push({ path: req.url ?? '', response: res })),
    );
    url = await listen(app);
  });

  afterAll(async () => {
    await app?.close();
  });

  it.each([
    ['/plain', 422],
    ['/passthrough', 202],
    ['/own-response', 202],
  ])('%s: the replay keeps its stored status %d, for the client and for finish listeners', async (path, status) => {
    const key = randomUUID();
    const first = await send(url, path, { key, body: {} });
    expect(first.status).toBe(status);
    const deadline = Date.now() + 2_000;
    while (finished.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    finished.length = 0;
    const replay = await send(url, path, { key, body: {} });
    expect(replay.status).toBe(status);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.json()).toEqual(first.json());
    while (finished.length === 0 && Date.now() < deadline + 2_000)
      await new Promise((resolve) => setTimeout(resolve, 10));
    // A later write by Nest would have changed the status or logged an error; give it a moment.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(finished.map(({ path, response }) => ({ path, status: response.statusCode }))).toEqual([{ path, status }]);
  });
});

/** A global interceptor of the kind many apps have: every result wrapped as `{ data }`. */
@Injectable()
class WrapInData implements NestInterceptor {
  intercept(_context: unknown, next: CallHandler) {
    return next.handle().pipe(map((data: unknown) => ({ data })));
  }
}

/** The same, as the README advises: a response already sent (a replay) passes through. */
@Injectable()
class WrapUnlessSent implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler) {
    const response = context.switchToHttp().getResponse<{ headersSent?: boolean; raw?: { headersSent: boolean } }>();
    const sent = () => (response.raw ?? response).headersSent === true;
    return next.handle().pipe(map((data: unknown) => (sent() ? data : { data })));
  }
}

/**
 * An interceptor outside `@Idempotent()` shapes the fresh response, whose bytes are stored; the
 * replay sends those bytes as they are, marked as a replay (it used to send the Web `Response`
 * it returned, wrapped and serialized as `{"data":{}}`).
 */
describe.each<Platform>(['express', 'fastify'])(
  'Replays under a global result-wrapping interceptor (%s)',
  (platform) => {
    let app: INestApplication;
    let url: string;

    beforeAll(async () => {
      app = await createApp(platform, false);
      app.useGlobalInterceptors(new WrapInData());
      url = await listen(app);
    });

    afterAll(async () => {
      await app?.close();
    });

    it.each(['/passthrough', '/own-response'])(
      '%s: the replay is the stored bytes of the wrapped response',
      async (path) => {
        const key = randomUUID();
        const first = await send(url, path, { key, body: {} });
        const replay = await send(url, path, { key, body: {} });
        expect(replay.status).toBe(first.status);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(replay.body.equals(first.body)).toBe(true);
      },
    );

    it('a route without the response object: the replay is the stored bytes of the wrapped response', async () => {
      const key = randomUUID();
      const first = await send(url, '/wrapped', { key, body: {} });
      expect(first.json()).toEqual({ data: { runs: expect.any(Number) } });
      const replay = await send(url, '/wrapped', { key, body: {} });
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body.equals(first.body)).toBe(true);
    });
  },
);

describe('Replays under a result-wrapping interceptor that passes sent responses through (express)', () => {
  it('sends the stored bytes and logs nothing', async () => {
    const logs = new RecordingLogger();
    const app = await createApp('express', logs);
    app.useGlobalInterceptors(new WrapUnlessSent());
    try {
      const url = await listen(app);
      const key = randomUUID();
      const first = await send(url, '/wrapped', { key, body: {} });
      expect(first.json()).toEqual({ data: { runs: expect.any(Number) } });
      const replay = await send(url, '/wrapped', { key, body: {} });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body.equals(first.body)).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(logs.at('error')).toEqual([]);
    } finally {
      await app.close();
    }
  });
});
