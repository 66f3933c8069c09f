import { Injectable, Logger, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import {
  ClientProxyFactory,
  RmqRecordBuilder,
  Transport,
  type ClientProxy,
  type RmqOptions,
} from '@nestjs/microservices';
import { IDEMPOTENCY_KEY_MESSAGE_HEADER } from 'nestjs-idempotency/consumers';
import { amqpQueueArguments, assertAmqpRedeliveryTopology, RmqMessageDeserializer } from 'nestjs-idempotency/amqp';
import { connect } from 'amqplib';
import { firstValueFrom, timeout } from 'rxjs';
import { InjectOrdersConfig, type OrdersConfig, type RabbitMqConfig } from '../config/orders.config.js';
import { redactUrl } from '../config/redact-url.js';
import { ORDER_CREATED_JOB, type OrderCreatedEvent } from './order-created.event.js';

/** How long a publish may wait for the broker's confirm before the event is left for the next outbox scan. */
const PUBLISH_TIMEOUT_MS = 5_000;

/**
 * The `order-events` queue's declaration, the same on the consumer and the producer side (RabbitMQ
 * refuses a second declaration with other arguments): durable, and whatever Nest rejects goes to
 * its dead-letter queue.
 */
function queueOptions(rabbitmq: RabbitMqConfig) {
  return { durable: true, arguments: amqpQueueArguments({ queue: rabbitmq.queue }) };
}

/**
 * Declares the queue, its retry queue and its dead-letter queue. The dead-letter queue must exist
 * before anything is rejected: RabbitMQ drops a dead letter whose queue does not exist.
 */
async function declareTopology(rabbitmq: RabbitMqConfig): Promise<void> {
  const connection = await connect(rabbitmq.url, { timeout: 5_000 });
  connection.on('error', () => undefined);
  try {
    const channel = await connection.createChannel();
    await channel.assertQueue(rabbitmq.queue, queueOptions(rabbitmq));
    await assertAmqpRedeliveryTopology(channel, { queue: rabbitmq.queue });
  } finally {
    await connection.close();
  }
}

/**
 * The RabbitMQ transport that consumes `order.created` (`OrderCreatedRmqConsumer`): manual
 * acknowledgements (`noAck: false`), which `rmqSettlement()` gives; 4 messages in flight; a body
 * that is not JSON reaches the consumer as an `UnparsableMessage` and is dead-lettered.
 */
export function orderEventsRmqTransport(rabbitmq: RabbitMqConfig): RmqOptions {
  return {
    transport: Transport.RMQ,
    options: {
      urls: [rabbitmq.url],
      queue: rabbitmq.queue,
      noAck: false,
      prefetchCount: 4,
      queueOptions: queueOptions(rabbitmq),
      deserializer: new RmqMessageDeserializer({ pattern: ORDER_CREATED_JOB }),
    },
  };
}

/**
 * Publishes `order.created` to RabbitMQ (when `RABBITMQ_URL` is set) as a persistent message,
 * confirmed by the broker, with the event id as `messageId` and the idempotency key of the
 * request that created the order in the `idempotency-key` header: the consumer takes effect
 * once per key, so the order's retried request and the event's redeliveries are each applied
 * once.
 */
@Injectable()
export class OrderEventsRabbitPublisher implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger('OrderEventsRabbitPublisher');
  private client?: ClientProxy;

  constructor(@InjectOrdersConfig('queue') private readonly queue: OrdersConfig['queue']) {}

  /** True when events go through RabbitMQ (`RABBITMQ_URL` is set). */
  get enabled(): boolean {
    return this.queue.rabbitmq !== undefined;
  }

  /** Declares the queues at startup; a broker that is down is reported, and publishing retries later. */
  async onApplicationBootstrap(): Promise<void> {
    if (!this.queue.rabbitmq) return;
    await declareTopology(this.queue.rabbitmq).catch((error: unknown) =>
      this.logger.warn(
        `could not declare the RabbitMQ queues of "${this.queue.rabbitmq?.queue}": ${(error as Error).message}`,
      ),
    );
  }

  async publish(event: OrderCreatedEvent, messageKey: string | null): Promise<void> {
    const rabbitmq = this.queue.rabbitmq;
    if (!rabbitmq) {
      throw new Error('RabbitMQ is not configured (no RABBITMQ_URL)');
    }
    this.client ??= this.connect(rabbitmq);
    const record = new RmqRecordBuilder(event)
      .setOptions({
        persistent: true,
        messageId: event.eventId,
        headers: { [IDEMPOTENCY_KEY_MESSAGE_HEADER]: messageKey ?? event.eventId },
      })
      .build();
    await firstValueFrom(this.client.emit(ORDER_CREATED_JOB, record).pipe(timeout(PUBLISH_TIMEOUT_MS)), {
      defaultValue: undefined,
    });
  }

  async onModuleDestroy(): Promise<void> {
    await this.client?.close();
  }

  private connect(rabbitmq: RabbitMqConfig): ClientProxy {
    this.logger.log(`Publishing events to RabbitMQ ${redactUrl(rabbitmq.url)} (queue "${rabbitmq.queue}")`);
    return ClientProxyFactory.create({
      transport: Transport.RMQ,
      options: { urls: [rabbitmq.url], queue: rabbitmq.queue, queueOptions: queueOptions(rabbitmq), persistent: true },
    });
  }
}
