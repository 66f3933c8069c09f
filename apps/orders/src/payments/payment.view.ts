import type { Currency } from '../orders/currency.js';
import type { Payment } from './payment.entity.js';
import type { PaymentStatus } from './payment-status.js';

/** The JSON shape of a charge (`GET /payments`). */
export interface PaymentView {
  id: string;
  orderId: string;
  amountCents: number;
  currency: Currency;
  providerKey: string;
  /** `charged`, then `settled` or `refunded` as the provider's webhook events arrive. */
  status: PaymentStatus;
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
    status: payment.status,
    createdAt: new Date(payment.createdAtMs).toISOString(),
  };
}
