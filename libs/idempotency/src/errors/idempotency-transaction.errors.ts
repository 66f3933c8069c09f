import { IdempotencyError } from './idempotency.error.js';

/**
 * Code inside a transactional route asked for a stronger isolation level than the route's
 * transaction BEGAN at (`manager.transaction('SERIALIZABLE', ...)`). A transaction's isolation
 * cannot change once it has begun: the nested call would only take a savepoint at the weaker
 * level, so it is refused instead of silently downgraded.
 *
 * @publicApi
 */
export class IdempotencyIsolationError extends IdempotencyError {
  constructor(
    readonly requested: string,
    readonly actual: string,
    readonly label?: string,
  ) {
    super(
      `${label ? `Transactional route ${label}: ` : ''}a transaction at ${requested} was asked inside the route's ` +
        `transaction, which began at ${actual}. Set it on the route instead: ` +
        `@Idempotent({ transactional: true, isolationLevel: '${requested}' }) (or the module's isolationLevel).`,
    );
  }
}

/**
 * A transactional `run()` (or a transactional route) was started inside the transaction of
 * another transactional route or `run()`, in the same async context. Its record would commit in
 * a transaction of its own while its caller's could still roll back (or, on a single-connection
 * database such as sql.js, the other way round), so it is refused: run it after the outer one, or
 * make it non-transactional and write through the outer transaction.
 *
 * @publicApi
 */
export class IdempotencyNestedTransactionError extends IdempotencyError {
  constructor(
    readonly operation: string,
    readonly outerOperation: string,
  ) {
    super(
      `The transactional idempotency run "${operation}" was started inside the transaction of "${outerOperation}". ` +
        "A nested transactional run cannot share its caller's fate, so it is refused: start it after the outer " +
        'transaction has committed, or drop transactional on the inner one and write through the outer transaction.',
    );
  }
}
