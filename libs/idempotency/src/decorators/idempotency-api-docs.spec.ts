import { importOptional } from './idempotency-api-docs.js';

describe('importOptional', () => {
  it('loads an installed module', async () => {
    const swagger = await importOptional<{ ApiHeader: unknown }>('@nestjs/swagger');
    expect(typeof swagger?.ApiHeader).toBe('function');
  });

  it('answers undefined for a module that is not installed, so @Idempotent() works without Swagger', async () => {
    await expect(importOptional('@nestjs/not-installed-anywhere')).resolves.toBeUndefined();
  });
});
