import { Controller } from '@nestjs/common';
import { EventPattern, Payload, type RmqContext } from '@nestjs/microservices';
import { IdempotencyContextRef } from 'nestjs-idempotency';
import { IdempotencyConsumerContext, IdempotentConsumer } from 'nestjs-idempotency/consumers';
import { rmqMessageKey, rmqSettlement } from 'nestjs-idempotency/amqp';
import type { EntityManager } from 'typeorm';
import { getConfigToken } from '@nestjs/config';
import { DEFAULT_RABBITMQ_QUEUE, type OrdersConfig } from '../config/orders.config.js';
import { ORDER_CREATED_JOB, type OrderCreatedEvent } from '../events/order-created.event.js';
import { ORDER_CONFIRMATION_CONSUMER, OrderCreatedProcessor } from './order-created.processor.js';
import type { OrderNotificationView } from './order-notification.view.js';

/**
 * `order.created` from RabbitMQ (when `RABBITMQ_URL` is set): the confirmation is sent once per
 * idempotency key, which the publisher put in the `idempotency-key` header (the key derived
 * from the `POST /orders` request that created the order). The notification and the completed
 * record commit in one transaction; `rmqSettlement()` acknowledges the message after it, hands
 * an in-progress duplicate or a failure back through the retry queue (an event naming an order
 * this database does not hold ends in the dead-letter queue after 5 attempts), and dead-letters
 * poison (no key, a body that is not JSON) at once. The queue it settles for is the configured
 * one (`RABBITMQ_QUEUE`), read from the app's configuration when the app starts.
 */
@Controller()
export class OrderCreatedRmqConsumer {
  constructor(private readonly processor: OrderCreatedProcessor) {}

  @EventPattern<string>(ORDER_CREATED_JOB)
  @IdempotentConsumer<OrderCreatedEvent, RmqContext>({
    consumer: ORDER_CONFIRMATION_CONSUMER,
    key: rmqMessageKey,
    settlement: rmqSettlement({
      queue: (app) => app.get<OrdersConfig['queue']>(getConfigToken('queue')).rabbitmq?.queue ?? DEFAULT_RABBITMQ_QUEUE,
      maxAttempts: 5,
    }),
    options: { transactional: true },
  })
  onOrderCreated(
    @Payload() event: OrderCreatedEvent,
    @IdempotencyConsumerContext() idem: IdempotencyContextRef,
  ): Promise<OrderNotificationView> {
    return this.processor.sendConfirmation(event, idem.getManager<EntityManager>());
  }
}
