/**
 * `@nestjs-cls/transactional` integration: the claim transaction of a transactional route becomes
 * the transaction `TransactionHost` and `@Transactional()` see, so services that write through
 * `txHost.tx` (or repositories taken from it) join it without being handed a manager.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { TransactionalAdapter } from '@nestjs-cls/transactional';

/** The one member of `TransactionHost` the integration calls. */
export interface TransactionHostLike {
  withTransaction<R>(propagation: string, fn: () => Promise<R>): Promise<R>;
}

/** The store option that runs a handler inside an ambient transaction (`TypeOrmIdempotencyStoreOptions.propagate`). */
export type TransactionPropagation = <T>(transaction: unknown, work: () => Promise<T>) => Promise<T>;

/** A claim transaction offered to the next transaction the adapter would open in this async context. */
interface Offer {
  readonly transaction: unknown;
  taken: boolean;
}

/** `Propagation.RequiresNew`: the adapter is always asked, even when the caller is already in a transaction. */
const REQUIRES_NEW = 'REQUIRES_NEW';

/**
 * Joins the idempotency layer's claim transactions to `@nestjs-cls/transactional`.
 *
 * A transactional route's claim transaction is opened by the durable store (its first statement is
 * the claim's INSERT). This class hands it to `TransactionHost` for the length of the handler:
 * {@link propagateTo} runs the handler in `txHost.withTransaction(...)`, and the adapter wrapped by
 * {@link adapter} adopts the claim transaction instead of opening one. Inside the handler,
 * `txHost.tx` is the claim's `EntityManager`, `@Transactional()` (the default `Required`
 * propagation) joins it, and `Propagation.Nested` takes a savepoint in it. `RequiresNew` still
 * opens a transaction of its own, outside the route's fate: don't use it for the route's writes.
 *
 * Use one instance for both halves (they share the offer through an `AsyncLocalStorage`).
 *
 * @example
 * // database.module.ts
 * export const idempotencyTransactions = new IdempotencyClsTransactions();
 * ClsModule.forRoot({
 *   global: true,
 *   middleware: { mount: true },
 *   plugins: [
 *     new ClsPluginTransactional({
 *       imports: [TypeOrmModule],
 *       adapter: idempotencyTransactions.adapter(new TransactionalAdapterTypeOrm({ dataSourceToken: DataSource })),
 *     }),
 *   ],
 * });
 * // idempotency module
 * IdempotencyModule.forRootAsync({
 *   inject: [DataSource, TransactionHost],
 *   useFactory: (dataSource: DataSource, txHost: TransactionHost) => ({
 *     durableStore: new TypeOrmIdempotencyStore(dataSource, { propagate: idempotencyTransactions.propagateTo(txHost) }),
 *   }),
 * });
 * @publicApi
 */
export class IdempotencyClsTransactions {
  private readonly offers = new AsyncLocalStorage<Offer>();

  /**
   * Wraps the adapter given to `ClsPluginTransactional`: when the idempotency layer offers its claim
   * transaction, the first transaction `TransactionHost` opens in that context is that one (no
   * BEGIN, no COMMIT: the idempotency layer commits it with the completed record). Every other
   * transaction is the wrapped adapter's own.
   */
  adapter<TConnection, TTx, TOptions>(
    adapter: TransactionalAdapter<TConnection, TTx, TOptions>,
  ): TransactionalAdapter<TConnection, TTx, TOptions> {
    const offers = this.offers;
    return Object.assign(Object.create(adapter) as TransactionalAdapter<TConnection, TTx, TOptions>, {
      optionsFactory: (connection: TConnection, extraProviders: unknown[]) => {
        const options = adapter.optionsFactory(connection, extraProviders);
        return {
          ...options,
          wrapWithTransaction: (
            txOptions: TOptions,
            fn: (...args: unknown[]) => Promise<unknown>,
            setTx: (client?: TTx) => void,
          ) => {
            const offer = offers.getStore();
            if (!offer || offer.taken) return options.wrapWithTransaction(txOptions, fn, setTx);
            offer.taken = true;
            setTx(offer.transaction as TTx);
            return fn();
          },
        };
      },
    });
  }

  /**
   * The durable store's `propagate` option: runs the handler in `txHost.withTransaction(...)`
   * with the claim transaction offered to the adapter {@link adapter} wrapped.
   */
  propagateTo(txHost: TransactionHostLike): TransactionPropagation {
    return <T>(transaction: unknown, work: () => Promise<T>) =>
      this.offers.run({ transaction, taken: false }, () => txHost.withTransaction(REQUIRES_NEW, work));
  }
}
