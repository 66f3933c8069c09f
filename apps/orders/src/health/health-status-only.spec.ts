import { statusOnly } from './health-status-only.js';

describe('statusOnly', () => {
  it('keeps each backend status and the status of its parts, and drops messages, errors and latencies', () => {
    expect(
      statusOnly({
        database: { status: 'down', message: 'connect ECONNREFUSED 10.0.3.7:5432' },
        redis: { status: 'down', message: 'timeout of 1000ms exceeded' },
        idempotency: {
          status: 'down',
          fast: {
            status: 'down',
            latencyMs: 1000.4,
            error: 'Redis idempotency store (redis.internal:6379): connect failed',
          },
          durable: { status: 'up', latencyMs: 1.2 },
        },
      }),
    ).toEqual({
      database: { status: 'down' },
      redis: { status: 'down' },
      idempotency: { status: 'down', fast: { status: 'down' }, durable: { status: 'up' } },
    });
  });

  it('keeps an empty section empty and an absent one absent; an entry that is not an object shows nothing', () => {
    expect(statusOnly({})).toEqual({});
    expect(statusOnly(undefined)).toBeUndefined();
    expect(statusOnly({ odd: 'connect ECONNREFUSED' })).toEqual({ odd: {} });
  });
});
