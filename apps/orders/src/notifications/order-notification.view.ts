import type { OrderNotification } from './order-notification.entity.js';

/** The JSON shape of a notification (`GET /orders/:id/notifications`). */
export interface OrderNotificationView {
  id: string;
  orderId: string;
  kind: 'order-confirmation';
  /** The `order.created` event it answers. */
  eventId: string;
  /** ISO-8601, UTC, millisecond precision. */
  sentAt: string;
}

export function toOrderNotificationView(notification: OrderNotification): OrderNotificationView {
  return {
    id: notification.id,
    orderId: notification.orderId,
    kind: notification.kind,
    eventId: notification.eventId,
    sentAt: new Date(notification.sentAtMs).toISOString(),
  };
}
