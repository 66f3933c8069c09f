/** The fields of an order line that make up its price. */
export interface PricedLine {
  quantity: number;
  unitPriceCents: number;
}

/**
 * Sum of quantity × unit price, in cents. With the validated limits (100 lines, 1000 units,
 * 100 000 000 cents) it stays below 10^13: above 2^31, which is why the column is a `bigint`,
 * and far below 2^53, so a JS number holds it exactly.
 */
export function orderTotalCents(lines: readonly PricedLine[]): number {
  const total = lines.reduce((sum, line) => sum + line.quantity * line.unitPriceCents, 0);
  if (!Number.isSafeInteger(total)) {
    throw new RangeError(`order total ${total} is not a safe integer number of cents`);
  }
  return total;
}
