import type { OutsideWritesPolicy, PropagateTransaction } from './route-transactions.js';

/**
 * Options of {@link TypeOrmIdempotencyStore}.
 *
 * @publicApi
 */
export interface TypeOrmIdempotencyStoreOptions {
  /**
   * SQLite (sql.js) only; ignored on PostgreSQL and MySQL. Runs `work` when no other transaction or query
   * of the application runs on the database, and resolves with its result.
   *
   * sql.js has ONE connection. Two transactions that overlap on it do not isolate each other:
   * the second `BEGIN` becomes a savepoint of the first, a statement issued meanwhile joins
   * whichever transaction is open, and a rollback undoes other callers' writes. So every
   * operation of the store (each one a few statements, or a whole `transaction()`) must run
   * alone on it. Pass the serializer your application already uses for its own transactions, so
   * that the store's operations and yours queue in one line. It must run `work` at once when it
   * is called from inside work it is already running (a handler inside `transaction()` may call
   * the store again), or it deadlocks.
   *
   * Without it, the store queues its own operations one at a time. That is enough only when
   * nothing else opens transactions on the same DataSource while the store works.
   * @default a queue private to the store
   */
  runExclusive?: <T>(work: () => Promise<T>) => Promise<T>;
  /**
   * PostgreSQL and MySQL / MariaDB: how long, in ms, `takeOver` (and a `claim` that replaces an expired row)
   * waits for the row lock of a live `transaction()`, and `claimInTransaction` waits for another
   * transaction's uncommitted claim of the key. When the lock is still held after that, its
   * owner is alive and working: `takeOver` returns `existing` with the row as last committed,
   * `claimInTransaction` returns `busy` (the engine answers `409` in progress). On MySQL the wait
   * of `claimInTransaction` is rounded up to whole seconds (`innodb_lock_wait_timeout`); the
   * other waits keep millisecond precision (`NOWAIT`, polled).
   * @default 2000
   */
  lockTimeoutMs?: number;
  /**
   * Runs the handler of a transactional route with the route's transaction (its `EntityManager`)
   * as the application's ambient transaction, so services that take their transaction from a
   * context library join it without being handed a manager. For `@nestjs-cls/transactional`,
   * `IdempotencyClsTransactions.propagateTo(txHost)` from `nestjs-idempotency/cls` builds it.
   * @default undefined (the handler writes through `IdempotencyContextRef.getManager()`)
   */
  propagate?: PropagateTransaction;
  /**
   * PostgreSQL and MySQL: what to do with a write of an entity (repository, manager, query builder) made
   * on another connection than the route's while a transactional route's handler runs: such a
   * write commits even when the route rolls back and its record is released. `warn` logs one
   * warning per route and table, naming the route; `throw` refuses the write (before it runs).
   * Raw `query()` calls are not seen.
   * @default 'warn', or 'ignore' when NODE_ENV is 'production'
   */
  outsideWrites?: OutsideWritesPolicy;
  /**
   * PostgreSQL: a transactional route's claim and completion are named prepared statements,
   * parsed and planned once per connection instead of on every request (about a tenth less
   * CPU for the route's transaction, and less database work, docs/performance.md). Turn it off behind a pooler that cannot keep prepared statements across
   * transactions (PgBouncer in transaction mode before 1.21, or without `max_prepared_statements`).
   * @default true
   */
  preparedStatements?: boolean;
  /**
   * PostgreSQL only, opt-in: the table is RANGE-partitioned by creation time (create it with
   * `IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS` instead of `IDEMPOTENCY_TYPEORM_MIGRATIONS`). Expired
   * records go with their whole partition, dropped by `deleteExpired` (the module's reaper) once
   * every row in it has expired, instead of being deleted row by row: the table stays the size of
   * the TTL window and leaves no dead rows to vacuum. Every claim takes a per-key advisory lock and
   * reads the key's row in every attached partition, so the claim stays exclusive across a
   * partition's edge. Routes' transactions run at READ COMMITTED (the default); a stronger
   * isolation level is refused. See docs/capacity.md, "The partitioned table".
   * @default undefined (one table, rows deleted by the reaper in batches)
   */
  partitioning?: IdempotencyPartitioning;
}

/**
 * `TypeOrmIdempotencyStoreOptions.partitioning`.
 *
 * @example
 * new TypeOrmIdempotencyStore(dataSource, { partitioning: { partitionMs: 24 * 60 * 60 * 1000 } })
 * @publicApi
 */
export interface IdempotencyPartitioning {
  /**
   * The width of one partition, in ms. Make it at least the records' TTL: a claim reads every
   * attached partition, about TTL / width + 3 of them; the reaper must run at least once per width.
   */
  partitionMs: number;
}
