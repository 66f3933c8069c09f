import { AsyncLocalStorage } from 'node:async_hooks';
import { TransactionHost } from '@nestjs-cls/transactional';
import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import type { OrdersTransactionHost } from './transactions.js';

/**
 * Opens transactions and runs reads on the service's database. Transactions are
 * `@nestjs-cls/transactional` ones (`TransactionHost.withTransaction`): code inside them reaches
 * the transaction through `TransactionHost.tx`, and a transaction asked for inside one (a
 * transactional route's included) joins it.
 *
 * What nestjs-cls does not do is the embedded database's one connection: on sql.js two
 * transactions that overlap would nest (the second becomes a savepoint of the first) and a read
 * would see uncommitted rows. So on sql.js every transaction and read runs one at a time, in call
 * order; work started inside a running one (same async context) runs at once instead of waiting
 * for itself. On PostgreSQL each transaction has its own pooled connection and nothing waits.
 */
@Injectable()
export class TransactionRunner {
  private readonly oneConnection: boolean;
  private readonly inside = new AsyncLocalStorage<true>();
  private tail: Promise<unknown> = Promise.resolve();

  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly txHost: TransactionHost,
  ) {
    this.oneConnection = dataSource.options.type === 'sqljs';
  }

  /**
   * Runs `work` in a transaction (the current one, if there is one): committed if it resolves,
   * rolled back if it throws. `manager` is the transaction's, as `TransactionHost.tx` is.
   */
  transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    const host = this.txHost as OrdersTransactionHost;
    return this.serialized(() => host.withTransaction(() => work(host.tx)));
  }

  /** Runs read-only `work` outside any transaction (after the running one, on sql.js). */
  read<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    return this.serialized(() => work(this.dataSource.manager));
  }

  /**
   * Runs `work` alone on sql.js (after the running transaction or read), at once on PostgreSQL.
   * The idempotency layer's durable store goes through here, so its statements and transactions
   * never interleave with the service's own on sql.js' single connection.
   */
  exclusive<T>(work: () => Promise<T>): Promise<T> {
    return this.serialized(work);
  }

  private serialized<T>(work: () => Promise<T>): Promise<T> {
    if (!this.oneConnection || this.inside.getStore() === true) {
      return work();
    }
    const run = this.tail.then(() => this.inside.run(true, work));
    this.tail = run.catch(() => undefined);
    return run;
  }
}
