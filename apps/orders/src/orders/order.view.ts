import type { Currency } from './currency.js';
import type { Order, OrderStatus } from './order.entity.js';

/** The JSON shape of an order (`POST /orders`, `GET /orders`, `GET /orders/:id`). */
export interface OrderView {
  id: string;
  tenantId: string;
  customerId: string;
  currency: Currency;
  items: { sku: string; quantity: number; unitPriceCents: number }[];
  totalCents: number;
  status: OrderStatus;
  paymentId: string | null;
  /** ISO-8601, UTC, millisecond precision. */
  createdAt: string;
}

export function toOrderView(order: Order): OrderView {
  return {
    id: order.id,
    tenantId: order.tenantId,
    customerId: order.customerId,
    currency: order.currency,
    items: [...order.items]
      .sort((a, b) => a.position - b.position)
      .map(({ sku, quantity, unitPriceCents }) => ({ sku, quantity, unitPriceCents })),
    totalCents: order.totalCents,
    status: order.status,
    paymentId: order.paymentId,
    createdAt: new Date(order.createdAtMs).toISOString(),
  };
}
