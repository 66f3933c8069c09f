import { Controller, Module, type INestMicroservice, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Payload, Transport, type RmqContext } from '@nestjs/microservices';
import type { ChannelModel, ConfirmChannel } from 'amqplib';
import { IdempotencyContextRef, IdempotencyModule, IdempotencyService } from 'nestjs-idempotency';
import { IdempotencyConsumerContext, IdempotentConsumer } from 'nestjs-idempotency/consumers';
import {
  amqpMessageKey,
  amqpQueueArguments,
  idempotentAmqpHandler,
  rmqMessageKey,
  RmqMessageDeserializer,
  rmqSettlement,
  type AmqpRedeliveryOptions,
} from 'nestjs-idempotency/amqp';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { rabbitmqUrl } from '../servers/rabbitmq.js';
import { redisUrl } from '../servers/redis.js';

/**
 * A charge consumer on the real broker, for the RabbitMQ suites: the same business logic (a
 * `Probe`) behind either adapter, Nest's RMQ transport with `@IdempotentConsumer()` and
 * `rmqSettlement()`, or `idempotentAmqpHandler()` on an amqplib confirm channel.
 */
export interface Charge {
  ref: string;
  amountCents: number;
}

/** What the handler did, what was delivered, and gates that hold the handler until a test opens them. */
export class Probe {
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

export const CHARGE_CONSUMER = 'billing.charge';
export const CHARGE_PATTERN = 'charge.requested';
/** The provider the Nest adapter reads its queue from at startup (`rmqSettlement({ queue: (app) => ... })`). */
export const CHARGES_QUEUE = Symbol('CHARGES_QUEUE');

/** One way of consuming the queue: Nest's RMQ transport, or amqplib with `idempotentAmqpHandler`. */
export interface ChargeAdapter {
  /** The message body for `charge` (Nest wraps it in its packet). */
  encode(charge: Charge): object;
  close(): Promise<void>;
}

export interface ChargeAdapterSetup {
  redelivery: AmqpRedeliveryOptions;
  probe: Probe;
  connection: ChannelModel;
  /** Where Nest's (and the library's) log lines go. @default none */
  logger?: LoggerService;
  /** Whether the queue's name reaches the settlement from a provider at startup (Nest adapter). @default false */
  queueFromProvider?: boolean;
}

export type StartChargeAdapter = (setup: ChargeAdapterSetup) => Promise<ChargeAdapter>;

function idempotencyModule(prefix: string) {
  return IdempotencyModule.forRoot({
    store: new RedisIdempotencyStore(redisUrl(), { prefix }),
    leaseMs: 2000,
    heartbeatMs: 500,
  });
}

/** `@IdempotentConsumer()` with `rmqSettlement()` on a Nest microservice (`Transport.RMQ`, `noAck: false`). */
export const nestRmqTransport: StartChargeAdapter = async ({ redelivery, probe, logger, queueFromProvider }) => {
  const { queue } = redelivery;
  @Controller()
  class ChargesConsumer {
    @EventPattern<string>(CHARGE_PATTERN)
    @IdempotentConsumer<Charge, RmqContext>({
      consumer: CHARGE_CONSUMER,
      key: (data, context) => {
        const key = rmqMessageKey(data, context);
        probe.deliver(key);
        return key;
      },
      fingerprint: (data) => JSON.stringify(data),
      settlement: rmqSettlement({
        ...redelivery,
        queue: queueFromProvider ? (app) => app.get<string>(CHARGES_QUEUE) : queue,
      }),
    })
    charge(@Payload() charge: Charge, @IdempotencyConsumerContext() idem: IdempotencyContextRef) {
      return probe.charge(charge, idem);
    }
  }
  @Module({
    imports: [idempotencyModule(`idem-rmq-${queue}`)],
    controllers: [ChargesConsumer],
    providers: [{ provide: CHARGES_QUEUE, useValue: queue }],
  })
  class ConsumerModule {}
  const service: INestMicroservice = await NestFactory.createMicroservice(ConsumerModule, {
    transport: Transport.RMQ,
    options: {
      urls: [rabbitmqUrl()],
      queue,
      noAck: false,
      prefetchCount: 4,
      queueOptions: { durable: true, arguments: amqpQueueArguments(redelivery) },
      deserializer: new RmqMessageDeserializer({ pattern: CHARGE_PATTERN }),
      maxConnectionAttempts: 1,
    },
    logger: logger ?? false,
  });
  await service.listen();
  return { encode: (charge) => ({ pattern: CHARGE_PATTERN, data: charge }), close: () => service.close() };
};

/**
 * `idempotentAmqpHandler()` on an amqplib confirm channel. Like amqp-connection-manager under
 * Nest's transport, it opens a new channel and consumes again when the broker closes one.
 */
export const amqplibChannel: StartChargeAdapter = async ({ redelivery, probe, connection, logger }) => {
  const { queue } = redelivery;
  @Module({ imports: [idempotencyModule(`idem-amqp-${queue}`)] })
  class HandlerModule {}
  const app = await NestFactory.createApplicationContext(HandlerModule, { logger: logger ?? false });
  let closing = false;
  let channel: ConfirmChannel;
  const consume = async (): Promise<void> => {
    channel = await connection.createConfirmChannel();
    channel.on('error', () => undefined);
    channel.on('close', () => {
      // The connection may be closing too: then there is nothing to consume on.
      if (!closing) consume().catch(() => undefined);
    });
    await channel.assertQueue(queue, { durable: true, arguments: amqpQueueArguments(redelivery) });
    await channel.prefetch(4);
    await channel.consume(
      queue,
      idempotentAmqpHandler<Charge>(
        app.get(IdempotencyService),
        {
          ...redelivery,
          channel,
          consumer: CHARGE_CONSUMER,
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
  };
  await consume();
  return {
    encode: (charge) => charge,
    close: async () => {
      closing = true;
      await channel.close().catch(() => undefined);
      await app.close();
    },
  };
};

/** Both adapters, for `describe.each`. */
export const CHARGE_ADAPTERS: [string, StartChargeAdapter][] = [
  ['Nest RMQ transport, @IdempotentConsumer + rmqSettlement', nestRmqTransport],
  ['amqplib confirm channel, idempotentAmqpHandler', amqplibChannel],
];
