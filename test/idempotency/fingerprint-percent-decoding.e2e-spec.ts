import { Body, Controller, Module, Post, Query, type INestApplication, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from 'nestjs-idempotency';
import { send, type HttpResult } from '../support/http/send.js';

/**
 * docs/contract.md B.4 rules 14-15: the query and a form body are percent-decoded as the platform's own
 * parsers decode them, and two requests a handler may see differently never share a
 * fingerprint. qs (Express forms, Express's `extended` queries) and fast-querystring (Fastify
 * queries and forms) keep a whole value as sent when any escape in it is invalid, so
 * `to=%zz%41` reaches the handler as `%zz%41` and `to=%zzA` as `%zzA`: issue 18 found the
 * second replayed the first. Express's default query parser decodes both to `%zzA`, but the
 * fingerprint does not depend on which parser an application configures: they differ there too.
 */
@Controller()
class TransfersController {
  private seq = 0;

  @Post('transfers')
  @Idempotent()
  create(@Query() query: unknown, @Body() body: unknown) {
    return { seq: ++this.seq, query, body };
  }
}

class CapturingLogger implements LoggerService {
  readonly warnings: string[] = [];
  log(): void {}
  error(): void {}
  warn(message: unknown): void {
    this.warnings.push(String(message));
  }
}

interface Variant {
  platform: 'express' | 'fastify';
  rawBody: boolean;
  /** Express only: `extended` makes qs parse queries too. */
  queryParser?: 'extended';
}

const variants: Array<[string, Variant]> = [
  ['Express, raw bodies kept, default query parser', { platform: 'express', rawBody: true }],
  [
    'Express, no raw bodies, extended (qs) query parser',
    { platform: 'express', rawBody: false, queryParser: 'extended' },
  ],
  ['Fastify, raw bodies kept', { platform: 'fastify', rawBody: true }],
  ['Fastify, no raw bodies', { platform: 'fastify', rawBody: false }],
];

const FORM = 'application/x-www-form-urlencoded';
const MISSING_RAW_BODY = /request\.rawBody is missing/;

describe.each(variants)('percent-decoding in the fingerprint (%s, memory store)', (_name, variant) => {
  let app: INestApplication;
  let url: string;
  const logger = new CapturingLogger();

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRoot({
          store: new MemoryIdempotencyStore(),
          scope: ['operation'],
          problemTypeBaseUri: 'https://docs.example.test/problems/',
        }),
      ],
      controllers: [TransfersController],
    })
    class DecodingModule {}
    const options = { rawBody: variant.rawBody, logger };
    app =
      variant.platform === 'express'
        ? await NestFactory.create(DecodingModule, options)
        : await NestFactory.create(DecodingModule, new FastifyAdapter(), options);
    if (variant.queryParser) app.getHttpAdapter().getInstance().set('query parser', variant.queryParser);
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  });
  afterAll(() => app?.close());

  const query = (key: string, text: string) => send(url, `/transfers?${text}`, { key, body: '{}' });
  const form = (key: string, text: string) => send(url, '/transfers', { key, body: text, contentType: FORM });
  const expectReused = (res: HttpResult) => {
    expect(res.status).toBe(422);
    expect(res.json()).toMatchObject({ code: 'idempotency_key_reused' });
  };
  const expectReplayOf = (res: HttpResult, first: HttpResult) => {
    expect(res.headers.get('idempotent-replayed')).toBe('true');
    expect(res.body.equals(first.body)).toBe(true);
  };

  it('rule 14: query to=%zz%41 then to=%zzA under one key is a 422; the same query again replays', async () => {
    const key = randomUUID();
    const first = await query(key, 'to=%zz%41');
    expect(first.status).toBe(201);
    expectReused(await query(key, 'to=%zzA'));
    expectReplayOf(await query(key, 'to=%zz%41'), first);
  });

  it('rule 15: form to=%zz%41 then to=%zzA under one key is a 422; the same form again replays', async () => {
    const key = randomUUID();
    const first = await form(key, 'to=%zz%41');
    expect(first.status).toBe(201);
    expect(first.json().body).toEqual({ to: '%zz%41' });
    expectReused(await form(key, 'to=%zzA'));
    expectReplayOf(await form(key, 'to=%zz%41'), first);
  });

  it('rules 14-15: a value whose escapes are all valid compares decoded: to=%41 and to=A are one request', async () => {
    const key = randomUUID();
    const first = await query(key, 'to=%41');
    expectReplayOf(await query(key, 'to=A'), first);
    const formKey = randomUUID();
    const firstForm = await form(formKey, 'to=a+b%21');
    expectReplayOf(await form(formKey, 'to=a%20b!'), firstForm);
  });

  it('rules 14-15: names of different roots may be reordered, names of one root may not (qs nests a[b] under a, by order)', async () => {
    const key = randomUUID();
    const first = await form(key, 'to=x&amount=1');
    expectReplayOf(await form(key, 'amount=1&to=x'), first);
    const nested = randomUUID();
    const firstNested = await form(nested, 'a=x&a[b]=y');
    expect(firstNested.status).toBe(201);
    if (variant.platform === 'fastify' && !variant.rawBody) {
      // Fingerprinted from what fast-querystring parsed: the handler gets { a: 'x', 'a[b]': 'y' } either way.
      expectReplayOf(await form(nested, 'a[b]=y&a=x'), firstNested);
    } else {
      expectReused(await form(nested, 'a[b]=y&a=x'));
    }
    const inQuery = randomUUID();
    expect((await query(inQuery, 'a=x&a[b]=y')).status).toBe(201);
    expectReused(await query(inQuery, 'a[b]=y&a=x'));
  });

  it(`rule 15: the missing-raw-body warning fires exactly when a body is fingerprinted from its parsed form (${variant.rawBody ? 'never here' : 'here'})`, async () => {
    await form(randomUUID(), 'to=x');
    await send(url, '/transfers', { key: randomUUID(), body: { amount: 1.0 } });
    const warned = logger.warnings.filter((message) => MISSING_RAW_BODY.test(message));
    expect(warned).toHaveLength(variant.rawBody ? 0 : 1);
  });
});
