import { randomUUID } from 'node:crypto';
import {
  Controller,
  HttpException,
  Module,
  UnprocessableEntityException,
  type INestMicroservice,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  ClientProxyFactory,
  EventPattern,
  MessagePattern,
  Payload,
  RpcException,
  Transport,
  type ClientProxy,
} from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import {
  IdempotencyContextRef,
  IdempotencyModule,
  IdempotencyRunError,
  MemoryIdempotencyStore,
  type IdempotencyStore,
} from 'nestjs-idempotency';
import {
  IdempotencyConsumerContext,
  IdempotentConsumer,
  IdempotentConsumerKeyError,
} from 'nestjs-idempotency/consumers';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { RecordingLogger } from '../support/recording-logger.js';
import { sleep } from '../support/timing.js';
import { connectRedisOrFail, redisUrl } from '../support/servers/redis.js';

interface Charge {
  eventId?: string;
  amountCents: number;
}

/** What the handlers did, and gates that hold a handler until the test opens them. */
class Probe {
  readonly runs = new Map<string, number>();
  readonly gates = new Map<string, Promise<void>>();
  readonly failures = new Map<string, Error[]>();
  readonly contexts: IdempotencyContextRef[] = [];
  readonly duplicates: string[] = [];
  /** What the custom settlement was asked to do, per message id. */
  readonly settlements: { id: string; action: string; reason: string }[] = [];

  ran(key: string): number {
    return this.runs.get(key) ?? 0;
  }
  count(key: string): void {
    this.runs.set(key, this.ran(key) + 1);
  }
  hold(key: string): () => void {
    let open!: () => void;
    this.gates.set(key, new Promise<void>((resolve) => (open = resolve)));
    return open;
  }
}

/**
 * An error the client can read: Nest sends any other error to a `@MessagePattern` client as
 * "Internal server error", so the handlers map the library's errors to `RpcException`s.
 */
const toRpc = (error: unknown) =>
  error instanceof IdempotencyRunError
    ? new RpcException({
        kind: error.kind,
        retryable: error.retryable,
        retryAfterSeconds: error.details.retryAfterSeconds,
      })
    : error instanceof IdempotentConsumerKeyError
      ? new RpcException({ kind: 'no-key', message: error.message })
      : error instanceof HttpException
        ? new RpcException({ kind: 'http', status: error.getStatus() })
        : new RpcException({ kind: 'failed', message: (error as Error).message });

/** The fixture microservice, with its own channel names so suites never hear each other. */
function consumerModule(prefix: string, probe: Probe, store: IdempotencyStore) {
  @Controller()
  class ChargesConsumer {
    @MessagePattern(`${prefix}.charge`)
    @IdempotentConsumer<Charge>({
      consumer: 'billing.charge',
      key: (charge) => charge.eventId,
      fingerprint: (charge) => JSON.stringify(charge),
      onDuplicate: (charge) => void probe.duplicates.push(charge.eventId!),
      mapError: toRpc,
    })
    async charge(@Payload() charge: Charge, @IdempotencyConsumerContext() idem: IdempotencyContextRef) {
      const key = charge.eventId!;
      probe.count(key);
      probe.contexts.push(idem);
      await probe.gates.get(key);
      const failure = probe.failures.get(key)?.shift();
      if (failure) throw failure;
      return { charged: charge.amountCents, run: probe.ran(key), chargeKey: idem.derivedKey('psp') };
    }

    @EventPattern<string>(`${prefix}.settled`)
    @IdempotentConsumer<{ id: string; rejectSettle?: boolean }>({
      consumer: 'ledger.settled',
      key: (event) => event.id,
      onDuplicate: () => {
        throw new Error('duplicate hook failed');
      },
      settlement: {
        settle: async (disposition, { data }) => {
          probe.settlements.push({ id: data.id, action: disposition.action, reason: disposition.reason });
          if (data.rejectSettle) throw new Error('broker gone');
        },
      },
    })
    async settled(@Payload() event: { id: string }) {
      probe.count(event.id);
    }

    @EventPattern<string>(`${prefix}.order-created`)
    @IdempotentConsumer<{ id: string }>({ consumer: 'mailer.order-created', key: (event) => event.id })
    async orderCreated(@Payload() event: { id: string }) {
      probe.count(event.id);
    }
  }
  @Module({
    imports: [IdempotencyModule.forRoot({ store, leaseMs: 3000, heartbeatMs: 1000 })],
    controllers: [ChargesConsumer],
  })
  class ConsumerModule {}
  return ConsumerModule;
}

/**
 * `@IdempotentConsumer()` on a real Nest microservice: the Redis transport
 * (`Transport.REDIS`, pub/sub on 127.0.0.1:6379), a real client, once per fast store.
 */
describe.each<[string, () => IdempotencyStore]>([
  ['memory', () => new MemoryIdempotencyStore()],
  ['redis', () => new RedisIdempotencyStore(redisUrl(), { prefix: `idem-consumer-${randomUUID().slice(0, 8)}` })],
])('@IdempotentConsumer on the Redis transport (%s store)', (_name, makeStore) => {
  const prefix = `consumers-${randomUUID().slice(0, 8)}`;
  const probe = new Probe();
  const logs = new RecordingLogger();
  let service: INestMicroservice;
  let client: ClientProxy;
  const { hostname, port } = new URL(redisUrl());
  const transport = { host: hostname, port: Number(port || 6379) };

  beforeAll(async () => {
    await connectRedisOrFail();
    service = await NestFactory.createMicroservice(consumerModule(prefix, probe, makeStore()), {
      transport: Transport.REDIS,
      options: transport,
      logger: logs,
    });
    await service.listen();
    client = ClientProxyFactory.create({ transport: Transport.REDIS, options: transport });
    await client.connect();
  });
  afterAll(async () => {
    await client?.close();
    await service?.close();
  });

  const charge = (payload: Charge) => firstValueFrom(client.send(`${prefix}.charge`, payload));
  const failureOf = (payload: Charge): Promise<Record<string, unknown>> =>
    charge(payload).then(
      (value: unknown) => ({ value }),
      (error: unknown) => error as Record<string, unknown>,
    );

  it('a duplicate of a completed message is acknowledged with the stored value; the handler ran once', async () => {
    const eventId = randomUUID();
    const first = await charge({ eventId, amountCents: 500 });
    const again = await charge({ eventId, amountCents: 500 });
    expect(first).toEqual({ charged: 500, run: 1, chargeKey: expect.stringMatching(/^idk_/) });
    expect(again).toEqual(first);
    expect(probe.ran(eventId)).toBe(1);
    expect(probe.duplicates).toContain(eventId);
  });

  it('the handler gets the context of its claim (@IdempotencyConsumerContext)', async () => {
    const eventId = randomUUID();
    await charge({ eventId, amountCents: 1 });
    const context = probe.contexts.at(-1)!;
    expect(context).toBeInstanceOf(IdempotencyContextRef);
    expect(context.fencingToken).toBe(1);
    expect(context.tookOver).toBe(false);
  });

  it('a duplicate while the original runs gets a retryable in-progress error and does not run', async () => {
    const eventId = randomUUID();
    const open = probe.hold(eventId);
    const original = charge({ eventId, amountCents: 700 });
    await sleep(100);
    expect(await failureOf({ eventId, amountCents: 700 })).toEqual({
      kind: 'in-progress',
      retryable: true,
      retryAfterSeconds: expect.any(Number),
    });
    expect(probe.ran(eventId)).toBe(1);
    open();
    expect(await original).toMatchObject({ charged: 700, run: 1 });
    expect(await charge({ eventId, amountCents: 700 })).toMatchObject({ charged: 700, run: 1 });
  });

  it('a failure is released by the outcome policy: the redelivery runs the handler again', async () => {
    const eventId = randomUUID();
    probe.failures.set(eventId, [new Error('ledger timeout')]);
    expect(await failureOf({ eventId, amountCents: 900 })).toEqual({ kind: 'failed', message: 'ledger timeout' });
    expect(await charge({ eventId, amountCents: 900 })).toMatchObject({ charged: 900, run: 2 });
    expect(probe.ran(eventId)).toBe(2);
  });

  it('a definitive failure (4xx) is stored: duplicates get it again as replayed-failure without running', async () => {
    const eventId = randomUUID();
    probe.failures.set(eventId, [new UnprocessableEntityException('unknown account')]);
    expect(await failureOf({ eventId, amountCents: 1 })).toEqual({ kind: 'http', status: 422 });
    expect(await failureOf({ eventId, amountCents: 1 })).toMatchObject({ kind: 'replayed-failure', retryable: false });
    expect(probe.ran(eventId)).toBe(1);
  });

  it('the same key with another payload is key-reused, and does not run', async () => {
    const eventId = randomUUID();
    await charge({ eventId, amountCents: 100 });
    expect(await failureOf({ eventId, amountCents: 200 })).toMatchObject({ kind: 'key-reused', retryable: false });
    expect(probe.ran(eventId)).toBe(1);
  });

  it('a message without a key is refused (IdempotentConsumerKeyError) and does not run', async () => {
    const before = [...probe.runs.values()].reduce((a, b) => a + b, 0);
    const refused = await failureOf({ amountCents: 5 });
    expect(refused).toMatchObject({ kind: 'no-key' });
    expect(String(refused.message)).toContain('billing.charge');
    expect([...probe.runs.values()].reduce((a, b) => a + b, 0)).toBe(before);
  });

  it('with a settlement, a duplicate is settled even when onDuplicate throws, and a settlement that rejects is logged, not thrown', async () => {
    const emit = (event: { id: string; rejectSettle?: boolean }) =>
      firstValueFrom(client.emit(`${prefix}.settled`, event), { defaultValue: undefined });
    const settledOf = (id: string) => probe.settlements.filter((s) => s.id === id).map((s) => [s.action, s.reason]);
    const until = async (check: () => boolean, what: string) => {
      const deadline = Date.now() + 5000;
      while (!check()) {
        if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
        await sleep(20);
      }
    };
    const id = randomUUID();
    await emit({ id });
    await until(() => settledOf(id).length === 1, 'the first delivery was settled');
    await emit({ id });
    await until(() => settledOf(id).length === 2, 'the duplicate was settled');
    expect(settledOf(id)).toEqual([
      ['ack', 'handled'],
      ['ack', 'duplicate'],
    ]);
    expect(logs.at('error')).toContainEqual(
      expect.stringContaining('ledger.settled: onDuplicate failed: Error: duplicate hook failed'),
    );
    const rejected = randomUUID();
    await emit({ id: rejected, rejectSettle: true });
    const unsettled = () =>
      logs
        .at('error')
        .filter((line) => line.includes('event=settlement_fallback') && line.includes('consumer=ledger.settled'));
    await until(() => unsettled().length === 1, 'the rejected settlement was logged');
    expect(unsettled()[0]).toMatch(/action=ack outcome=unsettled error="broker gone"/);
    expect([probe.ran(id), probe.ran(rejected)]).toEqual([1, 1]);
  });

  it('an event emitted 5 times (@EventPattern) is handled once', async () => {
    const id = randomUUID();
    for (let i = 0; i < 5; i++) {
      await firstValueFrom(client.emit(`${prefix}.order-created`, { id }), { defaultValue: undefined });
    }
    const deadline = Date.now() + 3000;
    while (probe.ran(id) === 0 && Date.now() < deadline) await sleep(20);
    await sleep(300);
    expect(probe.ran(id)).toBe(1);
  });
});
