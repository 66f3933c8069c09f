/**
 * What the TypeORM store does around a route's transaction beyond its own statements: runs the
 * handler with the transaction as the application's ambient one (`propagate`), refuses a stronger
 * isolation level asked inside it, and reports writes made outside it while it runs. @internal
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { Logger } from '@nestjs/common';
import type { DataSource, EntityManager, EntitySubscriberInterface, QueryRunner } from 'typeorm';
import { IdempotencyIsolationError } from '../errors/idempotency-transaction.errors.js';
import type { IdempotencyIsolationLevel } from '../interfaces/idempotency-module-options.interface.js';
import type { DurableTransactionOptions } from '../stores/durable-idempotency-store.js';

/** `TypeOrmIdempotencyStoreOptions.propagate`. */
export type PropagateTransaction = <T>(manager: EntityManager, work: () => Promise<T>) => Promise<T>;

/** `TypeOrmIdempotencyStoreOptions.outsideWrites`. */
export type OutsideWritesPolicy = 'warn' | 'throw' | 'ignore';

const STRENGTH: Record<IdempotencyIsolationLevel, number> = {
  'READ UNCOMMITTED': 0,
  'READ COMMITTED': 1,
  'REPEATABLE READ': 2,
  SERIALIZABLE: 3,
};

/** The transaction a route's handler is running in, as the async context sees it. */
interface ActiveRoute {
  readonly runner: QueryRunner;
  readonly label: string;
}

/** @internal */
export class RouteTransactions {
  private readonly active = new AsyncLocalStorage<ActiveRoute>();
  private readonly logger = new Logger('IdempotencyTransactions');
  /** (route, table) pairs already warned about: one warning each per process. */
  private readonly warned = new Set<string>();
  private subscribed = false;

  constructor(
    private readonly dataSource: DataSource,
    private readonly propagate: PropagateTransaction | undefined,
    private readonly outsideWrites: OutsideWritesPolicy,
  ) {}

  /** Runs the handler's `work` as the route's: the ambient transaction and the active route are `runner`'s. */
  run<T>(runner: QueryRunner, options: DurableTransactionOptions, work: () => Promise<T>): Promise<T> {
    this.subscribe();
    const route: ActiveRoute = { runner, label: options.label ?? 'a transactional route' };
    const propagate = this.propagate;
    return this.active.run(route, propagate ? () => propagate(runner.manager, work) : work);
  }

  /**
   * PostgreSQL and MySQL: once the route's transaction has begun, a nested `startTransaction` (TypeORM's
   * `manager.transaction(level, ...)`, `@Transactional({ isolationLevel })` with Nested
   * propagation) that asks for a stronger level than the route's is refused; TypeORM would take a
   * savepoint at the route's level and say nothing.
   */
  guardIsolation(runner: QueryRunner, options: DurableTransactionOptions): void {
    const begin = runner.startTransaction.bind(runner);
    const known = options.isolationLevel ?? (this.dataSource.options.isolationLevel as IdempotencyIsolationLevel);
    runner.startTransaction = async (requested?: string) => {
      const nested = runner.isTransactionActive;
      // The savepoint first: TypeORM answers a failed start with a rollback, which must undo the
      // savepoint only, never the route's transaction.
      await begin(requested as Parameters<QueryRunner['startTransaction']>[0]);
      if (!nested || !requested || !(requested in STRENGTH)) return;
      const actual = known ?? (await currentIsolation(runner));
      if (STRENGTH[requested as IdempotencyIsolationLevel] > STRENGTH[actual]) {
        throw new IdempotencyIsolationError(requested, actual, options.label);
      }
    };
  }

  /**
   * Adds the DataSource subscriber that sees writes of entities (repositories, managers and query
   * builders; not raw `query()`) made while a route's transaction is active in the async context,
   * on another connection than the route's: they would commit even when the route rolls back.
   * PostgreSQL only (sql.js has one connection: every write is in the open transaction).
   */
  private subscribe(): void {
    if (this.subscribed || this.outsideWrites === 'ignore') return;
    this.subscribed = true;
    const check = (event: { queryRunner: QueryRunner; metadata?: { tableName?: string } }) =>
      this.checkWrite(event.queryRunner, event.metadata?.tableName ?? 'an entity');
    const subscriber: EntitySubscriberInterface = {
      beforeInsert: check,
      beforeUpdate: check,
      beforeRemove: check,
      beforeSoftRemove: check,
    };
    this.dataSource.subscribers.push(subscriber);
  }

  private checkWrite(runner: QueryRunner, table: string): void {
    const route = this.active.getStore();
    if (!route || runner === route.runner) return;
    const message =
      `Transactional route ${route.label}: a write to ${table} ran outside its idempotency transaction, on a ` +
      'connection of its own: it commits even if the route rolls back and its record is released. Write through ' +
      "the route's EntityManager (IdempotencyContextRef.getManager()) or set up @nestjs-cls/transactional with " +
      'nestjs-idempotency/cls (docs/durable-tier.md, "Writing inside the transaction").';
    if (this.outsideWrites === 'throw') throw new Error(message);
    const once = `${route.label}\u0000${table}`;
    if (this.warned.has(once)) return;
    this.warned.add(once);
    this.logger.warn(message);
  }
}

async function currentIsolation(runner: QueryRunner): Promise<IdempotencyIsolationLevel> {
  const type = runner.connection.options.type;
  if (type !== 'mysql' && type !== 'mariadb') {
    const rows = (await runner.query('SHOW transaction_isolation')) as { transaction_isolation: string }[];
    return rows[0].transaction_isolation.toUpperCase() as IdempotencyIsolationLevel;
  }
  // MySQL 8 and MariaDB 11.1+ name it transaction_isolation; MariaDB before 11.1 only tx_isolation
  // (MySQL 8 removed that one). Either answers e.g. 'REPEATABLE-READ'.
  const rows = (await runner
    .query('SELECT @@SESSION.transaction_isolation AS level')
    .catch(() => runner.query('SELECT @@SESSION.tx_isolation AS level'))) as { level: string }[];
  return rows[0].level.replace('-', ' ').toUpperCase() as IdempotencyIsolationLevel;
}
