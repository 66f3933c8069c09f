import type { IdempotencyAdmin, IdempotencyRecordRef } from 'nestjs-idempotency/admin';
import { ProblemException } from '../common/problem-details/problem-details.js';
import { parseTenantId } from '../common/tenant/tenant-id.js';
import { validationProblem } from '../common/validation/validation.pipe.js';
import type { RecordRefDto } from './dto/admin-idempotency.dto.js';

/**
 * Turns the record fields of an admin request into the library's `IdempotencyRecordRef`:
 * `keyId` alone, or `operation` + `key` scoped to the tenant of `X-Tenant-ID` (the sample's
 * routes are scoped by tenant and operation). Bad input is a problem, never a guess.
 */
export function recordRefOf(
  dto: RecordRefDto,
  tenantHeader: string | string[] | undefined,
  admin: IdempotencyAdmin,
): IdempotencyRecordRef {
  if (dto.keyId !== undefined) {
    if (dto.operation !== undefined || dto.key !== undefined) {
      throw validationProblem(
        [{ field: 'keyId', messages: ['give either keyId, or operation and key, not both'] }],
        'Name the record either by keyId, or by operation and key.',
      );
    }
    return { keyId: dto.keyId };
  }
  const missing = (['operation', 'key'] as const).filter((field) => dto[field] === undefined);
  if (missing.length > 0) {
    throw validationProblem(
      missing.map((field) => ({ field, messages: [`${field} is required unless keyId is given`] })),
      'Name the record either by keyId, or by operation and key.',
    );
  }
  const tenant = parseTenantId(tenantHeader);
  if (tenant.kind === 'missing') {
    throw new ProblemException('tenantRequired', 'Records are scoped per tenant: send the X-Tenant-ID of the request.');
  }
  if (tenant.kind === 'invalid') {
    throw new ProblemException('tenantInvalid', 'The X-Tenant-ID header must hold exactly one UUID.');
  }
  const parsed = admin.parseKeyField(dto.key as string);
  if (parsed.kind !== 'valid') {
    throw validationProblem([{ field: 'key', messages: ['key is not a valid Idempotency-Key value'] }]);
  }
  return { operation: dto.operation as string, tenant: tenant.tenantId, key: parsed.key };
}
