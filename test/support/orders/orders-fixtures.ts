import { randomUUID } from 'node:crypto';

/** Request bodies, tenants and expected shapes for the orders service's suites. */

export const PROBLEM_BASE = 'https://api.example.com/problems/';
export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
export const ORDER_KEYS = [
  'id',
  'tenantId',
  'customerId',
  'currency',
  'items',
  'totalCents',
  'status',
  'paymentId',
  'createdAt',
];
export const PAYMENT_KEYS = ['id', 'orderId', 'amountCents', 'currency', 'providerKey', 'status', 'createdAt'];

export interface OrderBody {
  customerId: string;
  currency: string;
  items: { sku: string; quantity: number; unitPriceCents: number }[];
  [extra: string]: unknown;
}

/** A valid `POST /orders` body; `overrides` replace top-level fields. */
export function orderBody(overrides: Partial<OrderBody> = {}): OrderBody {
  return {
    customerId: randomUUID(),
    currency: 'EUR',
    items: [
      { sku: 'BOOK-1', quantity: 2, unitPriceCents: 1999 },
      { sku: 'PEN-7', quantity: 3, unitPriceCents: 250 },
    ],
    ...overrides,
  };
}

/** A valid body whose first item has `item` merged in. */
export function withFirstItem(item: Record<string, unknown>): OrderBody {
  const body = orderBody();
  return { ...body, items: [{ ...body.items[0], ...item } as OrderBody['items'][number], ...body.items.slice(1)] };
}

export const newTenant = (): string => randomUUID();
