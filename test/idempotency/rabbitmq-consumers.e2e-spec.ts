import { randomUUID } from 'node:crypto';
import { Controller, Module, UnprocessableEntityException, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Payload, Transport, type RmqContext } from '@nestjs/microservices';
import type { ChannelModel, ConfirmChannel, ConsumeMessage, GetMessage } from 'amqplib';
import { IdempotencyContextRef, IdempotencyModule, IdempotencyService } from 'nestjs-idempotency';
import {
  IDEMPOTENCY_KEY_MESSAGE_HEADER,
  IdempotencyConsumerContext,
  IdempotentConsumer,
} from 'nestjs-idempotency/consumers';
import {
  AMQP_ATTEMPTS_HEADER,
  AMQP_CONSUMER_HEADER,
  AMQP_DEAD_LETTER_ERROR_HEADER,
  AMQP_DEAD_LETTER_REASON_HEADER,
  amqpMessageKey,
  amqpQueueArguments,
  assertAmqpRedeliveryTopology,
  idempotentAmqpHandler,
  rmqMessageKey,
  RmqMessageDeserializer,
  rmqSettlement,
  type AmqpRedeliveryOptions,
} from 'nestjs-idempotency/amqp';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import {
  confirmChannel,
  connectRabbitOrFail,
  deleteQueues,
  drain,
  publishConfirmed,
  rabbitmqUrl,
  readyCount,
  waitFor,
} from '../support/servers/rabbitmq.js';
import { connectRedisOrFail, redisUrl } from '../support/servers/redis.js';

interface Charge {
  ref: string;
  amountCents: number;
}

/** What the handler did, what was delivered, and gates that hold the handler until a test opens them. */
class Probe {
  readonly runs = new Map<string, number>();
  readonly deliveries = new Map<string, number>();
  readonly gates = new Map<string, Promise<void>>();
  readonly failures = new Map<string, Error[]>();
  readonly contexts: IdempotencyContextRef[] = [];

  ran(ref: string): number {
    return this.runs.get(ref) ?? 0;
  }
  delivered(key: string | undefined): number {
    return this.deliveries.get(key ?? '<none>') ?? 0;
  }
  deliver(key: string | undefined): void {
    this.deliveries.set(key ?? '<none>', this.delivered(key) + 1);
  }
  hold(ref: string): () => void {
    let open!: () => void;
    this.gates.set(ref, new Promise<void>((resolve) => (open = resolve)));
    return open;
  }
  /** The business logic both adapters run: count, wait at the gate, fail as told, charge. */
  async charge(charge: Charge, idem: IdempotencyContextRef): Promise<{ charged: number; run: number }> {
    this.runs.set(charge.ref, this.ran(charge.ref) + 1);
    this.contexts.push(idem);
    await this.gates.get(charge.ref);
    const failure = this.failures.get(charge.ref)?.shift();
    if (failure) throw failure;
    return { charged: charge.amountCents, run: this.ran(charge.ref) };
  }
}

const CONSUMER = 'billing.charge';
const PATTERN = 'charge.requested';

/** One way of consuming the queue: Nest's RMQ transport, or amqplib with `idempotentAmqpHandler`. */
interface Adapter {
  /** The message body for `charge` (Nest wraps it in its packet). */
  encode(charge: Charge): object;
  close(): Promise<void>;
}

type StartAdapter = (
  queue: string,
  redelivery: AmqpRedeliveryOptions,
  probe: Probe,
  connection: ChannelModel,
) => Promise<Adapter>;

function idempotencyModule(prefix: string) {
  return IdempotencyModule.forRoot({
    store: new RedisIdempotencyStore(redisUrl(), { prefix }),
    leaseMs: 2000,
    heartbeatMs: 500,
  });
}

/** `@IdempotentConsumer()` with `rmqSettlement()` on a Nest microservice (`Transport.RMQ`, `noAck: false`). */
const nestRmqTransport: StartAdapter = async (queue, redelivery, probe) => {
  @Controller()
  class ChargesConsumer {
    @EventPattern<string>(PATTERN)
    @IdempotentConsumer<Charge, RmqContext>({
      consumer: CONSUMER,
      key: (data, context) => {
        const key = rmqMessageKey(data, context);
        probe.deliver(key);
        return key;
      },
      fingerprint: (data) => JSON.stringify(data),
      // Without `queue`: each message is settled for the queue it was delivered from.
      settlement: rmqSettlement({ ...redelivery, queue: undefined }),
    })
    charge(@Payload() charge: Charge, @IdempotencyConsumerContext() idem: IdempotencyContextRef) {
      return probe.charge(charge, idem);
    }
  }
  @Module({ imports: [idempotencyModule(`idem-rmq-${queue}`)], controllers: [ChargesConsumer] })
  class ConsumerModule {}
  const service: INestMicroservice = await NestFactory.createMicroservice(ConsumerModule, {
    transport: Transport.RMQ,
    options: {
      urls: [rabbitmqUrl()],
      queue,
      noAck: false,
      prefetchCount: 4,
      queueOptions: { durable: true, arguments: amqpQueueArguments(redelivery) },
      deserializer: new RmqMessageDeserializer({ pattern: PATTERN }),
      maxConnectionAttempts: 1,
    },
    logger: false,
  });
  await service.listen();
  return { encode: (charge) => ({ pattern: PATTERN, data: charge }), close: () => service.close() };
};

/** `idempotentAmqpHandler()` on a plain amqplib channel (not a confirm channel). */
const amqplibChannel: StartAdapter = async (queue, redelivery, probe, connection) => {
  @Module({ imports: [idempotencyModule(`idem-amqp-${queue}`)] })
  class HandlerModule {}
  const app = await NestFactory.createApplicationContext(HandlerModule, { logger: false });
  const channel = await connection.createChannel();
  channel.on('error', () => undefined);
  await channel.assertQueue(queue, { durable: true, arguments: amqpQueueArguments(redelivery) });
  await channel.prefetch(4);
  await channel.consume(
    queue,
    idempotentAmqpHandler<Charge>(
      app.get(IdempotencyService),
      {
        ...redelivery,
        channel,
        consumer: CONSUMER,
        key: ({ message }) => {
          const key = amqpMessageKey(message);
          probe.deliver(key);
          return key;
        },
        fingerprint: ({ body }) => JSON.stringify(body),
      },
      (charge, idem) => probe.charge(charge, idem),
    ),
    { noAck: false },
  );
  return {
    encode: (charge) => charge,
    close: async () => {
      await channel.close();
      await app.close();
    },
  };
};

/**
 * RabbitMQ redelivers: a consumer that dies before its ack gets the message back, and so does
 * one that nacks. Both adapters, on the real broker (127.0.0.1:5672) with the Redis store: every
 * message is acknowledged exactly once, duplicates never run the handler, an in-progress
 * duplicate waits in the retry queue instead of looping, and poison ends in the dead-letter
 * queue with its reason.
 */
describe.each<[string, StartAdapter]>([
  ['Nest RMQ transport, @IdempotentConsumer + rmqSettlement', nestRmqTransport],
  ['amqplib channel, idempotentAmqpHandler', amqplibChannel],
])('RabbitMQ consumers: %s', (_name, startAdapter) => {
  const queue = `idem-consumers-${randomUUID().slice(0, 8)}`;
  const redelivery: AmqpRedeliveryOptions = { queue, retryDelayMs: 200, maxRetryDelayMs: 5000, maxAttempts: 3 };
  const retryQueue = `${queue}.retry`;
  const deadLetterQueue = `${queue}.dead-letter`;
  const probe = new Probe();
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  let adapter: Adapter;
  const deadLetters: GetMessage[] = [];

  beforeAll(async () => {
    await connectRedisOrFail();
    connection = await connectRabbitOrFail();
    channel = await confirmChannel(connection);
    await assertAmqpRedeliveryTopology(channel, redelivery);
    adapter = await startAdapter(queue, redelivery, probe, connection);
  });
  afterAll(async () => {
    await adapter?.close();
    if (connection) {
      await deleteQueues(connection, [queue, retryQueue, deadLetterQueue]);
      await connection.close();
    }
  });

  /** Publishes a charge with `key` in the `idempotency-key` header (none when null). */
  const publish = (charge: Charge, key: string | null = charge.ref) =>
    publishConfirmed(channel, queue, adapter.encode(charge), {
      persistent: true,
      headers: { 'x-test': charge.ref, ...(key !== null && { [IDEMPOTENCY_KEY_MESSAGE_HEADER]: key }) },
    });
  const settled = () =>
    waitFor(
      async () => (await readyCount(channel, queue)) === 0 && (await readyCount(channel, retryQueue)) === 0,
      'the queues are empty',
    );
  /** The dead letters of test message `ref` (the dead-letter queue is drained into `deadLetters`). */
  const deadLettersOf = async (ref: string, count = 1): Promise<GetMessage[]> => {
    const of = () => deadLetters.filter((m) => m.properties.headers?.['x-test'] === ref);
    await waitFor(async () => {
      deadLetters.push(...(await drain(channel, deadLetterQueue)));
      return of().length >= count;
    }, `${count} dead letter(s) of ${ref}`);
    return of();
  };
  const reasonOf = (message: GetMessage | ConsumeMessage) =>
    String(message.properties.headers?.[AMQP_DEAD_LETTER_REASON_HEADER]);

  it('a duplicate of a completed message is acknowledged without running the handler (more duplicates than the prefetch)', async () => {
    const ref = randomUUID();
    await publish({ ref, amountCents: 500 });
    await waitFor(() => probe.ran(ref) === 1 && probe.delivered(ref) === 1, 'the first delivery ran');
    for (let i = 0; i < 6; i++) await publish({ ref, amountCents: 500 });
    // Unacknowledged messages would stop the deliveries at the prefetch of 4.
    await waitFor(() => probe.delivered(ref) === 7, 'all 7 deliveries reached the consumer');
    await settled();
    expect(probe.ran(ref)).toBe(1);
    expect(probe.contexts.at(-1)!.fencingToken).toBe(1);
  });

  it('a duplicate while the original runs waits in the retry queue (no hot loop) and is applied once when the original finishes', async () => {
    const ref = randomUUID();
    const open = probe.hold(ref);
    await publish({ ref, amountCents: 700 });
    await waitFor(() => probe.ran(ref) === 1, 'the original runs');
    await publish({ ref, amountCents: 700 });
    await waitFor(async () => (await readyCount(channel, retryQueue)) === 1, 'the duplicate waits in the retry queue');
    expect(probe.delivered(ref)).toBe(2);
    open();
    // Back after the original's remaining lease: replayed, acknowledged.
    await waitFor(() => probe.delivered(ref) === 3, 'the duplicate is delivered again after its delay');
    await settled();
    expect(probe.delivered(ref)).toBe(3);
    expect(probe.ran(ref)).toBe(1);
  });

  it('a transient handler failure releases the key: the message is redelivered after a backoff and runs again', async () => {
    const ref = randomUUID();
    probe.failures.set(ref, [new Error('ledger timeout')]);
    await publish({ ref, amountCents: 900 });
    await waitFor(() => probe.ran(ref) === 2, 'the redelivery ran the handler again');
    await settled();
    expect(probe.delivered(ref)).toBe(2);
  });

  it('a final failure (4xx) is stored and acknowledged; a duplicate gets it without running', async () => {
    const ref = randomUUID();
    probe.failures.set(ref, [new UnprocessableEntityException('unknown account')]);
    await publish({ ref, amountCents: 1 });
    await waitFor(() => probe.ran(ref) === 1 && probe.delivered(ref) === 1, 'the first delivery ran');
    await settled();
    await publish({ ref, amountCents: 1 });
    await waitFor(() => probe.delivered(ref) === 2, 'the duplicate was delivered');
    await settled();
    expect(probe.ran(ref)).toBe(1);
    deadLetters.push(...(await drain(channel, deadLetterQueue)));
    expect(deadLetters.filter((m) => m.properties.headers?.['x-test'] === ref)).toEqual([]);
  });

  it('a failure that lasts is retried maxAttempts times, then dead-lettered (attempts-exhausted)', async () => {
    const ref = randomUUID();
    probe.failures.set(ref, [
      new Error('ledger down'),
      new Error('ledger down'),
      new Error('ledger down'),
      new Error('ledger down'),
    ]);
    await publish({ ref, amountCents: 3 });
    const [letter] = await deadLettersOf(ref);
    expect(reasonOf(letter)).toBe('attempts-exhausted');
    expect(letter.properties.headers?.[AMQP_ATTEMPTS_HEADER]).toBe(3);
    expect(letter.properties.headers?.[AMQP_DEAD_LETTER_ERROR_HEADER]).toBe('Error: ledger down');
    expect(letter.properties.headers?.[AMQP_CONSUMER_HEADER]).toBe(CONSUMER);
    expect(probe.ran(ref)).toBe(3);
    expect(probe.delivered(ref)).toBe(3);
  });

  it('poison goes to the dead-letter queue once, with its reason: no key, a body that is not JSON, a key reused with another payload', async () => {
    const before = probe.delivered(undefined);
    const noKey = randomUUID();
    await publish({ ref: noKey, amountCents: 5 }, null);
    const [withoutKey] = await deadLettersOf(noKey);
    expect(reasonOf(withoutKey)).toBe('missing-key');
    expect(probe.delivered(undefined)).toBe(before + 1);
    expect(probe.ran(noKey)).toBe(0);

    const garbled = randomUUID();
    await publishConfirmed(channel, queue, 'this is not JSON {', {
      headers: { 'x-test': garbled, [IDEMPOTENCY_KEY_MESSAGE_HEADER]: garbled },
    });
    const [unparsable] = await deadLettersOf(garbled);
    expect(reasonOf(unparsable)).toBe('unparsable-body');
    expect(unparsable.content.toString()).toBe('this is not JSON {');

    const reused = randomUUID();
    await publish({ ref: reused, amountCents: 100 });
    await waitFor(() => probe.ran(reused) === 1, 'the first payload ran');
    await publish({ ref: reused, amountCents: 200 });
    const [mismatch] = await deadLettersOf(reused);
    expect(reasonOf(mismatch)).toBe('key-reused');
    expect(JSON.stringify(adapter.encode({ ref: reused, amountCents: 200 }))).toBe(mismatch.content.toString());
    await settled();
    expect(probe.ran(reused)).toBe(1);
    expect(probe.delivered(reused)).toBe(2);
  });

  it('every message was acknowledged: once the consumer closes, nothing is left in the queues', async () => {
    await settled();
    await adapter.close();
    adapter = { encode: adapter.encode, close: async () => undefined };
    expect(await readyCount(channel, queue)).toBe(0);
    expect(await readyCount(channel, retryQueue)).toBe(0);
    deadLetters.push(...(await drain(channel, deadLetterQueue)));
    expect(deadLetters.map(reasonOf).sort()).toEqual([
      'attempts-exhausted',
      'key-reused',
      'missing-key',
      'unparsable-body',
    ]);
  });
});
