import { parsePaymentEvent } from './payment-event.js';

describe('parsePaymentEvent', () => {
  it('reads a supported event and ignores extra members', () => {
    expect(
      parsePaymentEvent({
        id: 'evt_1',
        type: 'payment.refunded',
        data: { paymentId: 'p-1', amount: 5 },
        livemode: false,
      }),
    ).toEqual({ kind: 'event', event: { id: 'evt_1', type: 'payment.refunded', paymentId: 'p-1' } });
  });

  it('acknowledges an event type it does not handle without reading its data', () => {
    expect(parsePaymentEvent({ id: 'evt_2', type: 'payment.disputed' })).toEqual({
      kind: 'unsupported',
      id: 'evt_2',
      type: 'payment.disputed',
    });
  });

  it.each([
    [[], ''],
    [null, ''],
    [{ type: 'payment.settled', data: { paymentId: 'p' } }, 'id'],
    [{ id: '', type: 'payment.settled', data: { paymentId: 'p' } }, 'id'],
    [{ id: 'evt 1', type: 'payment.settled', data: { paymentId: 'p' } }, 'id'],
    [{ id: 'e'.repeat(256), type: 'payment.settled', data: { paymentId: 'p' } }, 'id'],
    [{ id: 'evt_1', type: 7, data: { paymentId: 'p' } }, 'type'],
    [{ id: 'evt_1', type: 'payment.settled' }, 'data.paymentId'],
    [{ id: 'evt_1', type: 'payment.settled', data: { paymentId: 42 } }, 'data.paymentId'],
  ])('refuses %j (field %s)', (body, field) => {
    const parsed = parsePaymentEvent(body);
    expect(parsed.kind).toBe('invalid');
    expect(parsed.kind === 'invalid' && parsed.errors.map((e) => e.field)).toContain(field);
  });
});
