import { MAX_ITEMS, MAX_QUANTITY, MAX_UNIT_PRICE_CENTS } from './order-limits.js';
import { orderTotalCents } from './order-total.js';

describe('orderTotalCents', () => {
  it('sums quantity × unit price', () => {
    expect(
      orderTotalCents([
        { quantity: 2, unitPriceCents: 1999 },
        { quantity: 1, unitPriceCents: 0 },
        { quantity: 3, unitPriceCents: 250 },
      ]),
    ).toBe(4748);
  });

  it('is exact above 2^31 and at the validated maximum', () => {
    expect(orderTotalCents([{ quantity: 1000, unitPriceCents: 100_000_000 }])).toBe(100_000_000_000);
    const biggest = Array.from({ length: MAX_ITEMS }, () => ({
      quantity: MAX_QUANTITY,
      unitPriceCents: MAX_UNIT_PRICE_CENTS,
    }));
    expect(orderTotalCents(biggest)).toBe(10_000_000_000_000);
  });

  it('refuses totals a JS number cannot hold exactly', () => {
    expect(() => orderTotalCents([{ quantity: 2 ** 30, unitPriceCents: 2 ** 30 }])).toThrow(RangeError);
  });
});
