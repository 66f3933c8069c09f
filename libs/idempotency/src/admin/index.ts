/**
 * `nestjs-idempotency/admin`: the operator's tools (look a record up, list stuck requests, force
 * one free). `IdempotencyAdmin` is a provider of `IdempotencyModule`: inject it.
 *
 * @publicApi
 */
export { IdempotencyAdmin } from './idempotency-admin.service.js';
export type * from './idempotency-admin.types.js';
export type { ParsedKey } from '../http/idempotency-key.parser.js';
