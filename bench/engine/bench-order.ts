/**
 * The bench route's 310-byte order, as the in-process benches store it (`bench:engine` returns
 * it from `run()`, `bench:retention` completes every record with it).
 */
export const BENCH_ORDER = {
  id: '7b0c2f4e-6f55-4c8e-9a3b-1b2d3c4e5f60',
  tenantId: '6f1c1f3e-8a55-4b8e-9a57-3f7f1b0a2c10',
  customerId: '0b6b9c0e-2f4d-4d7a-9a77-5d1c7f3b8e21',
  status: 'pending',
  currency: 'EUR',
  totalCents: 8498,
  items: [
    { sku: 'SKU-1001', quantity: 2, unitPriceCents: 1999 },
    { sku: 'SKU-2002', quantity: 1, unitPriceCents: 4500 },
  ],
  createdAt: '2026-11-23T23:59:59.999Z',
};
