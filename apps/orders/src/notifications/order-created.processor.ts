import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { IdempotencyService } from 'nestjs-idempotency';
import {
  idempotentProcessor,
  type IdempotentJob,
  type IdempotentJobResultUnavailable,
} from 'nestjs-idempotency/bullmq';
import { UnrecoverableError } from 'bullmq';
import type { EntityManager } from 'typeorm';
import { Clock } from '../common/clock.js';
import type { OrderCreatedEvent } from '../events/order-created.event.js';
import { Order } from '../orders/order.entity.js';
import { OrderNotification } from './order-notification.entity.js';
import { toOrderNotificationView, type OrderNotificationView } from './order-notification.view.js';

/** The consumer's name: the idempotency operation under which `order.created` event ids are unique. */
export const ORDER_CONFIRMATION_CONSUMER = 'notifications.order-created';

/**
 * Sends the confirmation of a new order, once per `order.created` event, however often the job
 * is delivered (a worker killed mid-job, a retry, the outbox relay enqueueing it twice). The
 * notification row and the completed idempotency record commit in one transaction: a worker
 * that dies before the commit leaves neither, and the redelivery runs it again; one that dies
 * after it leaves both, and the redelivery replays. The same `process` function is the BullMQ
 * processor and, without Redis, the in-process handler of the outbox relay.
 */
@Injectable()
export class OrderCreatedProcessor {
  /** Resolves to the confirmation's view, or to the marker when the view was not stored with the record (the confirmation was sent). */
  readonly process: (
    job: IdempotentJob<OrderCreatedEvent>,
    token?: string,
    signal?: AbortSignal,
  ) => Promise<OrderNotificationView | IdempotentJobResultUnavailable>;

  constructor(
    idempotency: IdempotencyService,
    private readonly clock: Clock,
  ) {
    this.process = idempotentProcessor<IdempotentJob<OrderCreatedEvent>, OrderNotificationView>(
      idempotency,
      { consumer: ORDER_CONFIRMATION_CONSUMER, key: (job) => job.data.eventId, options: { transactional: true } },
      (job, context) => this.sendConfirmation(job.data, context.getManager<EntityManager>()),
    );
  }

  /**
   * Writes the confirmation of `event` through `manager` (the idempotency transaction). Also the
   * handler of the RabbitMQ consumer (`OrderCreatedRmqConsumer`).
   */
  async sendConfirmation(event: OrderCreatedEvent, manager: EntityManager): Promise<OrderNotificationView> {
    const order = await manager.findOneBy(Order, { id: event.orderId, tenantId: event.tenantId });
    if (!order) {
      // The outbox publishes only committed orders: this event belongs to another database.
      throw new UnrecoverableError(`order.created ${event.eventId} names an order this database does not hold`);
    }
    const notification = manager.create(OrderNotification, {
      id: randomUUID(),
      tenantId: order.tenantId,
      orderId: order.id,
      eventId: event.eventId,
      kind: 'order-confirmation',
      sentAtMs: this.clock.nowMs(),
    });
    await manager.insert(OrderNotification, notification);
    return toOrderNotificationView(notification);
  }
}
