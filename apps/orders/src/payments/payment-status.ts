/**
 * Where a charge stands at the provider: `charged` when created, `settled` once the funds
 * arrived, `refunded` once they were given back. The provider's webhook events
 * (`payment.settled`, `payment.refunded`) move it forward only: events can arrive out of order
 * (a late `payment.settled` after `payment.refunded`), and a status never goes back.
 */
export type PaymentStatus = 'charged' | 'settled' | 'refunded';

/** The provider event types that change a payment's status. */
export type PaymentEventType = 'payment.settled' | 'payment.refunded';

export const PAYMENT_EVENT_TYPES: readonly PaymentEventType[] = ['payment.settled', 'payment.refunded'];

const TARGET: Record<PaymentEventType, PaymentStatus> = {
  'payment.settled': 'settled',
  'payment.refunded': 'refunded',
};

const RANK: Record<PaymentStatus, number> = { charged: 0, settled: 1, refunded: 2 };

/** The status `type` moves a payment to. */
export function targetStatus(type: PaymentEventType): PaymentStatus {
  return TARGET[type];
}

/**
 * The statuses `type` moves a payment from (those ranked below its target): the event's update
 * is `SET status = target WHERE status IN (statusesBefore(type))`, one atomic statement, so two
 * events of one payment applied at once cannot move it backwards either.
 */
export function statusesBefore(type: PaymentEventType): PaymentStatus[] {
  const target = RANK[TARGET[type]];
  return (Object.keys(RANK) as PaymentStatus[]).filter((status) => RANK[status] < target);
}
