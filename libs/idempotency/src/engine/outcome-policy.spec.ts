import { decideOutcome } from './outcome-policy.js';

const defaults = { storeServerErrors: false, storeClientErrors: true };

describe('decideOutcome (docs/contract.md B.7)', () => {
  it.each([200, 201, 204, 301, 303])('rule 17: stores a %i', (status) => {
    expect(decideOutcome(status, defaults)).toBe('store');
  });
  it.each([400, 402, 404, 409, 422])('rule 17: stores a client error %i by default', (status) => {
    expect(decideOutcome(status, defaults)).toBe('store');
  });
  it.each([408, 423, 425, 429])('rule 17: releases the transient %i, even with both store flags on', (status) => {
    expect(decideOutcome(status, defaults)).toBe('release');
    expect(decideOutcome(status, { storeServerErrors: true, storeClientErrors: true })).toBe('release');
  });
  it.each([500, 502, 503, 504])('rule 17: releases a server error %i by default', (status) => {
    expect(decideOutcome(status, defaults)).toBe('release');
  });
  it('rule 18: storeServerErrors stores a 500', () => {
    expect(decideOutcome(500, { storeServerErrors: true, storeClientErrors: true })).toBe('store');
  });
  it('rule 20: storeClientErrors false releases a 404 but still stores a 201', () => {
    const policy = { storeServerErrors: false, storeClientErrors: false };
    expect(decideOutcome(404, policy)).toBe('release');
    expect(decideOutcome(201, policy)).toBe('store');
  });
  it('rule 19: an override wins over the status', () => {
    expect(decideOutcome(503, defaults, 'store')).toBe('store');
    expect(decideOutcome(201, defaults, 'release')).toBe('release');
  });
});
