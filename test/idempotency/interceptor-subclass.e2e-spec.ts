import { Controller, Injectable, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { randomUUID } from 'node:crypto';
import {
  createIdempotentDecorator,
  IdempotencyInterceptor,
  IdempotencyModule,
  MemoryIdempotencyStore,
  type IdempotencyHttpRequest,
  type IdempotencyProblemKind,
  type IdempotencyProblemOptions,
  type ParsedKey,
  type ResolvedPolicy,
} from 'nestjs-idempotency';

/** A subclass that shapes problem bodies and reads the key from another header. */
@Injectable()
class ShapedInterceptor extends IdempotencyInterceptor {
  protected override createProblem(kind: IdempotencyProblemKind, options?: IdempotencyProblemOptions) {
    const exception = super.createProblem(kind, options);
    exception.problem.docs = 'https://api.example.com/docs/idempotency';
    return exception;
  }

  protected override getKey(request: IdempotencyHttpRequest, policy: ResolvedPolicy): ParsedKey {
    const legacy = request.headers['x-request-key'];
    if (legacy !== undefined) request.headers['idempotency-key'] = legacy;
    return super.getKey(request, policy);
  }
}

const ShapedIdempotent = createIdempotentDecorator(ShapedInterceptor);

@Controller()
class ChargesController {
  private runs = 0;

  @Post('charges')
  @ShapedIdempotent({ required: true, scope: ['operation'] })
  create() {
    return { run: ++this.runs };
  }
}

@Module({
  imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })],
  controllers: [ChargesController],
})
class SubclassModule {}

/** `createIdempotentDecorator()` binds a subclass: its protected hooks decide, and only it runs. */
describe('IdempotencyInterceptor subclassed through createIdempotentDecorator()', () => {
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    app = await NestFactory.create(SubclassModule, { logger: false, rawBody: true });
    await app.listen(0, '127.0.0.1');
    url = `http://127.0.0.1:${(app.getHttpServer().address() as { port: number }).port}`;
  });
  afterAll(() => app?.close());

  const post = (headers: Record<string, string>) => fetch(`${url}/charges`, { method: 'POST', headers });

  it('createProblem(): the subclass shapes the problem body', async () => {
    const response = await post({});
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({
      code: 'idempotency_key_missing',
      docs: 'https://api.example.com/docs/idempotency',
    });
  });

  it('getKey(): the subclass reads the key, and the engine replays under it (one run)', async () => {
    const key = randomUUID();
    const first = await post({ 'x-request-key': key });
    const retry = await post({ 'x-request-key': key });
    expect(first.status).toBe(201);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await retry.json()).toEqual(await first.json());
  });
});
