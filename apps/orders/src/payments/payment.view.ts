import type { Currency } from '../orders/currency.js';
import type { Payment } from './payment.entity.js';

/** The JSON shape of a charge (`GET /payments`). */
export interface PaymentView {
  id: string;
  orderId: string;
  amountCents: number;
  currency: Currency;
  providerKey: string;
  /** ISO-8601, UTC, millisecond precision. */
  createdAt: string;
}

export function toPaymentView(payment: Payment): PaymentView {
  return {
    id: payment.id,
    orderId: payment.orderId,
    amountCents: payment.amountCents,
    currency: payment.currency,
    providerKey: payment.providerKey,
    createdAt: new Date(payment.createdAtMs).toISOString(),
  };
}
