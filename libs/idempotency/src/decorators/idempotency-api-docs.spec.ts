import { Controller, HttpCode, Post } from '@nestjs/common';
import { DECORATORS } from '@nestjs/swagger';
import { idempotencyApiDocs, importOptional, whenApiDocsApplied } from './idempotency-api-docs.js';

describe('importOptional', () => {
  it('loads an installed module', async () => {
    const swagger = await importOptional<{ ApiHeader: unknown }>('@nestjs/swagger');
    expect(typeof swagger?.ApiHeader).toBe('function');
  });

  it('answers undefined for a module that is not installed, so @Idempotent() works without Swagger', async () => {
    await expect(importOptional('@nestjs/not-installed-anywhere')).resolves.toBeUndefined();
  });
});

describe('idempotencyApiDocs', () => {
  it('documents routes declared before Swagger finished loading, once whenApiDocsApplied() resolves', async () => {
    @Controller('charges')
    class ChargesController {
      @Post()
      @idempotencyApiDocs({ required: true })
      create(): void {}

      @Post('refunds')
      @HttpCode(202)
      @idempotencyApiDocs({ mismatchStatus: 409 })
      refund(): void {}
    }
    await whenApiDocsApplied();
    const responsesOf = (handler: object) =>
      Object.keys(Reflect.getMetadata(DECORATORS.API_RESPONSE, handler) ?? {}).sort();
    expect(responsesOf(ChargesController.prototype.create)).toEqual(['201', '400', '409', '422', '503']);
    expect(responsesOf(ChargesController.prototype.refund)).toEqual(['202', '400', '409', '503']);
    const headers = Reflect.getMetadata(DECORATORS.API_PARAMETERS, ChargesController.prototype.create) as Array<{
      name: string;
      in: string;
      required: boolean;
    }>;
    expect(headers).toEqual([expect.objectContaining({ name: 'Idempotency-Key', in: 'header', required: true })]);
  });
});
