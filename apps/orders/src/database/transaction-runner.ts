import { AsyncLocalStorage } from 'node:async_hooks';
import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { DataSource, EntityManager } from 'typeorm';

/**
 * Opens transactions and runs reads on the service's database.
 *
 * On PostgreSQL it is a thin wrapper: each transaction gets its own pooled connection.
 * sql.js has ONE connection: two `DataSource.transaction()` calls that overlap would nest (the
 * second becomes a savepoint of the first) and a read would see uncommitted rows. So on sql.js
 * every transaction and read runs one at a time, in call order. Work started inside a running
 * transaction or read (same async context) runs at once instead of waiting for itself.
 *
 * Whoever opens a transaction on this database (the idempotency layer included) goes through
 * here; code that already has an `EntityManager` uses it directly.
 */
@Injectable()
export class TransactionRunner {
  private readonly oneConnection: boolean;
  private readonly inside = new AsyncLocalStorage<true>();
  private tail: Promise<unknown> = Promise.resolve();

  constructor(@InjectDataSource() private readonly dataSource: DataSource) {
    this.oneConnection = dataSource.options.type === 'sqljs';
  }

  /** Runs `work` in one database transaction: committed if it resolves, rolled back if it throws. */
  transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    return this.serialized(() => this.dataSource.transaction(work));
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
