import {
  Controller,
  Injectable,
  Module,
  Post,
  UseInterceptors,
  type CallHandler,
  type ExecutionContext,
  type INestApplication,
  type NestInterceptor,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from 'nestjs-idempotency';

const probe = { runs: 0, flushNext: false };

/** An outer layer that sends the head early (once): the claimed request can then not set its headers. */
@Injectable()
class FlushHeadOnceInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler) {
    if (probe.flushNext) {
      probe.flushNext = false;
      context.switchToHttp().getResponse<ServerResponse>().flushHeaders();
    }
    return next.handle();
  }
}

@Controller()
@UseInterceptors(FlushHeadOnceInterceptor)
class ChargesController {
  @Post('charges')
  @Idempotent({ required: true, scope: ['operation'] })
  create() {
    probe.runs += 1;
    return { run: probe.runs };
  }
}

@Module({
  imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })],
  controllers: [ChargesController],
})
class SetupFailureModule {}

/**
 * The claim is made, then setting up its request fails before the handler could run (here the
 * key echo cannot be set on a response whose head an outer layer already sent): the claim must
 * not stay live, renewed by its heartbeat (and, on a transactional route, holding an open
 * transaction), until the process ends.
 */
describe('a claimed request whose setup fails', () => {
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    app = await NestFactory.create(SetupFailureModule, { logger: false, rawBody: true });
    await app.listen(0, '127.0.0.1');
    url = `http://127.0.0.1:${(app.getHttpServer().address() as { port: number }).port}`;
  });
  afterAll(() => app?.close());

  const post = (key: string) =>
    fetch(`${url}/charges`, { method: 'POST', headers: { 'idempotency-key': key } }).then(
      async (response) => ({ status: response.status, body: await response.text() }),
      (error: unknown) => ({ status: 0, body: String(error) }),
    );

  it('frees the key: nothing ran, and the retry runs the handler once', async () => {
    const key = randomUUID();
    probe.flushNext = true;
    await post(key);
    expect(probe.runs).toBe(0);
    const retry = await post(key);
    expect({ status: retry.status, runs: probe.runs }).toEqual({ status: 201, runs: 1 });
  });
});
