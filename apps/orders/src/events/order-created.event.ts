import type { OutboxEvent } from './outbox-event.entity.js';

/** The queue that carries the service's events, and the job name of `order.created`. */
export const ORDER_EVENTS_QUEUE = 'order-events';
export const ORDER_CREATED_JOB = 'order.created';

/** The data of an `order.created` job. */
export interface OrderCreatedEvent {
  /** The outbox event id: the job id and the consumers' idempotency key. */
  eventId: string;
  tenantId: string;
  orderId: string;
}

export function toOrderCreatedEvent(event: OutboxEvent): OrderCreatedEvent {
  return { eventId: event.id, tenantId: event.tenantId, orderId: event.orderId };
}
