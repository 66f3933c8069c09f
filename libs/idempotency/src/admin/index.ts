export { IdempotencyAdmin } from './idempotency-admin.service.js';
export type * from './idempotency-admin.types.js';
