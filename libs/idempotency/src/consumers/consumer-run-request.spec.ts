import { consumerRunRequest } from './consumer-run-request.js';
import { IdempotentConsumerKeyError } from './idempotent-consumer-key.error.js';

describe('consumerRunRequest', () => {
  const message = { eventId: 'evt_1', tenantId: 't-1', body: { a: 1 } };

  it('uses the consumer as the operation and reads key, fingerprint and tenant from the message', () => {
    const request = consumerRunRequest(
      {
        consumer: 'billing.order-created',
        key: (m: typeof message, ctx: string) => `${m.eventId}:${ctx}`,
        fingerprint: (m) => JSON.stringify(m.body),
        tenant: (m) => m.tenantId,
        options: { leaseMs: 5000 },
      },
      message,
      'ctx',
    );
    expect(request).toEqual({
      operation: 'billing.order-created',
      key: 'evt_1:ctx',
      fingerprint: '{"a":1}',
      tenant: 't-1',
      options: { leaseMs: 5000 },
    });
  });

  it.each([undefined, ''])('refuses a message whose key is %j', (key) => {
    expect(() => consumerRunRequest({ consumer: 'mailer', key: () => key }, message)).toThrow(
      IdempotentConsumerKeyError,
    );
    expect(() => consumerRunRequest({ consumer: 'mailer', key: () => key }, message)).toThrow(/consumer "mailer"/);
  });
});
