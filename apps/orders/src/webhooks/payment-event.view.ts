import type { PaymentEvent } from './payment-event.entity.js';

/** The JSON shape of an applied provider event (`GET /payments/:id/events`). */
export interface PaymentEventView {
  /** The provider's event id. */
  id: string;
  type: string;
  paymentId: string;
  /** When it was applied: ISO-8601, UTC, millisecond precision. */
  receivedAt: string;
}

export function toPaymentEventView(event: PaymentEvent): PaymentEventView {
  return {
    id: event.id,
    type: event.type,
    paymentId: event.paymentId,
    receivedAt: new Date(event.receivedAtMs).toISOString(),
  };
}
