import { isSameCharge, type ChargeRequest } from './payments.service.js';

const charge: ChargeRequest = {
  tenantId: '3f2504e0-4f89-41d3-9a0c-0305e82c3301',
  orderId: '9b2f7a1e-2c5d-4f0a-8e3b-1d6c7a8b9c0d',
  amountCents: 4748,
  currency: 'EUR',
  providerKey: 'key-1',
};

describe('isSameCharge', () => {
  it('matches the same tenant, order, amount and currency', () => {
    expect(isSameCharge(charge, { ...charge })).toBe(true);
  });

  it.each([
    ['tenantId', '3f2504e0-4f89-41d3-9a0c-0305e82c3302'],
    ['orderId', '9b2f7a1e-2c5d-4f0a-8e3b-1d6c7a8b9c0e'],
    ['amountCents', 4749],
    ['currency', 'USD'],
  ])('differs when %s differs', (field, value) => {
    expect(isSameCharge(charge, { ...charge, [field]: value })).toBe(false);
  });
});
