import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import { IdempotencyClsTransactions } from 'nestjs-idempotency/cls';

/**
 * The bridge between the idempotency layer and `@nestjs-cls/transactional`: the transaction of a
 * transactional route (`@Idempotent({ transactional: true })`) is the one `TransactionHost` hands
 * out while its handler runs, so every service that writes through `txHost.tx` joins it, and its
 * writes commit with the completed idempotency record, or not at all.
 */
export const idempotencyTransactions = new IdempotencyClsTransactions();

/** The `@nestjs-cls/transactional` adapter of the service's DataSource, joined to the idempotency layer. */
export const transactionalAdapter = () =>
  idempotencyTransactions.adapter(new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken() }));

/** What services inject to reach the current transaction: `txHost.tx` is its `EntityManager`. */
export type OrdersTransactionHost = import('@nestjs-cls/transactional').TransactionHost<TransactionalAdapterTypeOrm>;
