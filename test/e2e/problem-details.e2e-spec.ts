import { Controller, Get, HttpException, type INestApplication, Res } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { ProblemDetailsFilter } from '../../apps/orders/src/common/problem-details/problem-details.filter.js';
import { loadOrdersConfig } from '../../apps/orders/src/config/orders-config.module.js';

/**
 * The seam with the idempotency library: it throws HttpExceptions whose response already is a
 * problem body, after setting headers on the response. The app's filter must send both as they are.
 */
const LIBRARY_PROBLEM = {
  type: 'https://problems.example.org/idempotency-request-in-progress',
  title: 'A request is outstanding for this Idempotency-Key',
  status: 409,
  detail: 'A request with the same Idempotency-Key for the same operation is still being processed.',
  code: 'idempotency_request_in_progress',
};

interface HeaderSink {
  header(name: string, value: string): unknown;
}

@Controller('fixture')
class LibraryLikeController {
  @Get('in-progress')
  inProgress(@Res({ passthrough: true }) response: HeaderSink): never {
    response.header('Retry-After', '1');
    response.header('Idempotency-Key', '"8e03978e-40d5-43e8-bc93-6894a57f9324"');
    response.header('Cache-Control', 'no-store');
    response.header('Content-Language', 'en');
    throw new HttpException(LIBRARY_PROBLEM, 409);
  }

  @Get('plain-error')
  plainError(): never {
    throw new TypeError("Cannot read properties of undefined (reading 'secret')");
  }
}

describe('problem details filter (seam with the idempotency library)', () => {
  let app: INestApplication;
  let http: ReturnType<typeof request>;

  beforeAll(async () => {
    // The service's ConfigModule, built from these variables only (process.env is not read).
    const { module: configModule } = await loadOrdersConfig({ PROBLEM_TYPE_BASE_URI: 'https://errors.example.com/p/' });
    const moduleRef = await Test.createTestingModule({
      imports: [configModule],
      controllers: [LibraryLikeController],
      providers: [{ provide: APP_FILTER, useClass: ProblemDetailsFilter }],
    }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    http = request(await app.getUrl());
  });

  afterAll(async () => {
    await app?.close();
  });

  it('sends a ready problem body unchanged, with its status and the headers already set', async () => {
    const res = await http.get('/fixture/in-progress');
    expect(res.status).toBe(409);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.body).toEqual(LIBRARY_PROBLEM);
    expect(res.headers['retry-after']).toBe('1');
    expect(res.headers['idempotency-key']).toBe('"8e03978e-40d5-43e8-bc93-6894a57f9324"');
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.headers['content-language']).toBe('en');
  });

  it('uses the configured base URI for its own problem types', async () => {
    const res = await http.get('/nothing-here');
    expect(res.status).toBe(404);
    expect(res.body.type).toBe('https://errors.example.com/p/not-found');
  });

  it('hides the message of an unexpected error', async () => {
    const res = await http.get('/fixture/plain-error');
    expect(res.status).toBe(500);
    expect(res.body.type).toBe('https://errors.example.com/p/internal-error');
    expect(res.text).not.toContain('secret');
  });
});
