import { Controller, HttpException, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyModule, IdempotencyService, MemoryIdempotencyStore } from 'nestjs-idempotency';
import { currentIdempotencyContext, withIdempotency } from 'nestjs-idempotency/client';
import { fakeTime } from '../support/fake-time.js';
import { startScriptedServer, type ScriptedServer } from '../support/http/scripted-server.js';

/**
 * Inside a claimed handler, a downstream call carries the key derived from the request's own
 * key (`derivedKey()`), so a retry of the request that runs the handler again sends the same
 * downstream key: both halves of safe retries, end to end, on a real Nest app.
 */
let downstream: ScriptedServer;
const downstreamClient = withIdempotency(fetch, { maxAttempts: 1, retryBudget: false });

@Controller()
class CheckoutController {
  @Post('checkout')
  @Idempotent({ required: true, scope: ['operation'] })
  async checkout() {
    const charge = await downstreamClient(`${downstream.url}/charges`, { method: 'POST', body: '{}' });
    // A failed charge is a 502: released, so the caller's retry runs this handler again.
    if (charge.status >= 500) throw new HttpException('the payment provider failed', 502);
    return { keySource: charge.idempotency.keySource };
  }
}

describe('a downstream call inside a claimed handler', () => {
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    downstream = await startScriptedServer();
    @Module({
      imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })],
      controllers: [CheckoutController],
    })
    class CheckoutModule {}
    app = await NestFactory.create(CheckoutModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    url = await app.getUrl();
  });
  afterAll(async () => {
    await app?.close();
    await downstream?.close();
  });

  it("sends the request's derived key, the same when the caller's retry runs the handler again", async () => {
    downstream.script({ status: 500 }, { status: 201 });
    const time = fakeTime();
    const caller = withIdempotency(fetch, { now: time.now, sleep: time.sleep, retryBudget: false });
    const key = randomUUID();
    const res = await caller(`${url}/checkout`, { method: 'POST', idempotencyKey: key });
    expect(res.status).toBe(201);
    expect(await res.json()).toEqual({ keySource: 'context' });
    expect(res.idempotency).toMatchObject({ attempts: 2, key });

    const sent = downstream.received.map((request) => request.headers['idempotency-key']);
    expect(sent).toHaveLength(2);
    expect(sent[0]).toMatch(/^idk_[A-Za-z0-9_-]{43}$/);
    expect(sent[1]).toBe(sent[0]);
    expect(sent[0]).not.toContain(key);

    // Another request key, another downstream key.
    downstream.script({ status: 201 });
    await caller(`${url}/checkout`, { method: 'POST', idempotencyKey: randomUUID() });
    expect(downstream.received[0].headers['idempotency-key']).not.toBe(sent[0]);
  });

  it('IdempotencyService.run() gives its function the same ambient context', async () => {
    const service = app.get(IdempotencyService);
    downstream.script({ status: 201 });
    const result = await service.run({ operation: 'mail.send', key: 'evt-1' }, async (context) => {
      const res = await downstreamClient(`${downstream.url}/mails`, { method: 'POST', body: '{}' });
      return { same: currentIdempotencyContext() === context, keySource: res.idempotency.keySource };
    });
    expect(result.value).toEqual({ same: true, keySource: 'context' });
    expect(downstream.received[0].headers['idempotency-key']).toMatch(/^idk_/);
  });

  it('outside a claimed handler there is no context, and the key is random', async () => {
    expect(currentIdempotencyContext()).toBeUndefined();
    downstream.script({ status: 201 });
    const res = await downstreamClient(`${downstream.url}/charges`, { method: 'POST', body: '{}' });
    expect(res.idempotency.keySource).toBe('random');
    expect(downstream.received[0].headers['idempotency-key']).toBe(res.idempotency.key);
  });
});
