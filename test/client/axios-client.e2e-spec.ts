import { HttpModule, HttpService } from '@nestjs/axios';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import axios, { AxiosError, type AxiosRequestConfig } from 'axios';
import { firstValueFrom } from 'rxjs';
import {
  IdempotentRequestError,
  withIdempotencyAxios,
  type IdempotentCallOutcome,
  type IdempotentAxiosConfig,
  type IdempotentClientOptions,
} from 'nestjs-idempotency/client';
import { problem } from '../support/http/scripted-server.js';
import { scriptedServerSuite } from '../support/http/scripted-server-suite.js';

type Outcome = { idempotency: IdempotentCallOutcome };

/**
 * `withIdempotencyAxios()` on a plain axios instance and on Nest's `HttpService` (@nestjs/axios,
 * loaded under native-ESM Jest), against a bare node:http server: the same rules as the fetch
 * client, through axios' interceptors.
 */
describe('withIdempotencyAxios against a bare HTTP server', () => {
  const suite = scriptedServerSuite();
  const { keysSent, options } = suite;

  describe('a plain axios instance', () => {
    const instance = (extra?: IdempotentClientOptions) =>
      withIdempotencyAxios(axios.create({ baseURL: suite.server.url }), options(extra));

    it('retries a 503 and a 409 in progress with the same key, and says the attempts and the replay', async () => {
      suite.server.script({ status: 503 }, problem(409, 'idempotency-request-in-progress', { 'Retry-After': '1' }), {
        status: 201,
        headers: { 'Idempotent-Replayed': 'true' },
        body: { id: 'ch_1' },
      });
      const res = (await instance().post('/charges', { amountCents: 1200 })) as unknown as Outcome & {
        data: unknown;
      };
      expect(res.data).toEqual({ id: 'ch_1' });
      expect(res.idempotency).toMatchObject({ attempts: 3, replayed: true, keySource: 'random' });
      expect(new Set(keysSent())).toEqual(new Set([res.idempotency.key]));
      expect(suite.server.received.map((r) => r.body)).toEqual(Array(3).fill(JSON.stringify({ amountCents: 1200 })));
      expect(suite.time.waits[1]).toBe(1000);
    });

    it('never retries a 422: the AxiosError carries the outcome', async () => {
      suite.server.script(problem(422, 'idempotency-key-reused'), { status: 201 });
      const error = (await instance()
        .post('/charges', {})
        .catch((e: unknown) => e)) as AxiosError & Outcome;
      expect(error).toBeInstanceOf(AxiosError);
      expect(error.response?.status).toBe(422);
      expect(error.idempotency).toMatchObject({ attempts: 1, stoppedBy: 'final-answer' });
      expect(suite.server.received).toHaveLength(1);
    });

    it('retries a connection cut before the response; gives up with IdempotentRequestError after maxAttempts', async () => {
      suite.server.script('drop', { status: 201 });
      const key = 'order-7';
      const config: AxiosRequestConfig & IdempotentAxiosConfig = { idempotencyKey: key };
      const res = (await instance().post('/charges', {}, config)) as unknown as Outcome;
      expect(res.idempotency).toMatchObject({ attempts: 2, key, keySource: 'explicit' });
      expect(keysSent()).toEqual([key, key]);

      suite.server.script('drop');
      const error = (await instance({ maxAttempts: 2 })
        .post('/charges', {})
        .catch((e: unknown) => e)) as IdempotentRequestError;
      expect(error).toBeInstanceOf(IdempotentRequestError);
      expect(error).toMatchObject({ reason: 'max-attempts', attempts: 2 });
    });

    it('stops when the caller aborts during a wait', async () => {
      suite.server.script({ status: 503 }, { status: 201 });
      const controller = new AbortController();
      const abortingSleep = (ms: number, signal?: AbortSignal) => {
        controller.abort(new Error('shutting down'));
        return suite.time.sleep(ms, signal);
      };
      const error = await instance({ sleep: abortingSleep })
        .post('/charges', {}, { signal: controller.signal })
        .catch((e: unknown) => e);
      expect(error).toEqual(new Error('shutting down'));
      expect(suite.server.received).toHaveLength(1);
    });

    it('passes GET through without a key, retried; a non-idempotent method outside keyedMethods is not retried', async () => {
      suite.server.script({ status: 502 }, { status: 200 });
      const got = (await instance().get('/orders/1')) as unknown as Outcome;
      expect(got.idempotency).toMatchObject({ attempts: 2, key: undefined });
      expect(keysSent()).toEqual([undefined, undefined]);

      suite.server.script({ status: 503 }, { status: 201 });
      const error = (await instance({ keyedMethods: ['PATCH'] })
        .post('/charges', {})
        .catch((e: unknown) => e)) as AxiosError & Outcome;
      expect(error.idempotency).toMatchObject({ attempts: 1, stoppedBy: 'unsafe-method' });
    });
  });

  describe("Nest's HttpService (@nestjs/axios)", () => {
    let context: INestApplicationContext;
    let http: HttpService;

    beforeAll(async () => {
      @Module({ imports: [HttpModule.register({})] })
      class ClientModule {}
      context = await NestFactory.createApplicationContext(ClientModule, { logger: false });
      http = context.get(HttpService);
      withIdempotencyAxios(http.axiosRef, options());
    });
    afterAll(async () => {
      await context?.close();
    });

    it('refuses to be applied twice to one instance (the retries would multiply)', () => {
      expect(() => withIdempotencyAxios(http.axiosRef, options())).toThrow('already applied');
    });

    it('every HttpService POST carries one key across its retries', async () => {
      suite.server.script(
        { status: 504 },
        { status: 429, headers: { 'Retry-After': '2' } },
        { status: 201, body: { id: 1 } },
      );
      const res = (await firstValueFrom(
        http.post(`${suite.server.url}/charges`, { amountCents: 5 }),
      )) as unknown as Outcome & {
        status: number;
      };
      expect(res.status).toBe(201);
      expect(res.idempotency.attempts).toBe(3);
      expect(new Set(keysSent()).size).toBe(1);
    });
  });
});
