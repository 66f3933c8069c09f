/**
 * `nestjs-idempotency/cls`: transactional routes with `@nestjs-cls/transactional` (an optional
 * peer; nothing here is loaded by the core).
 */
export {
  IdempotencyClsTransactions,
  type TransactionHostLike,
  type TransactionPropagation,
} from './idempotency-cls-transactions.js';
