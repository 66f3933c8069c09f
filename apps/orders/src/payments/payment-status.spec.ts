import { statusesBefore, targetStatus } from './payment-status.js';

describe('payment status', () => {
  it('each event type has its target status', () => {
    expect(targetStatus('payment.settled')).toBe('settled');
    expect(targetStatus('payment.refunded')).toBe('refunded');
  });

  it('an event moves a payment forward only: from the statuses ranked below its target', () => {
    expect(statusesBefore('payment.settled')).toEqual(['charged']);
    expect(statusesBefore('payment.refunded')).toEqual(['charged', 'settled']);
  });
});
