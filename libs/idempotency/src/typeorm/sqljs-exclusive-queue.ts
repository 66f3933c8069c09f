/**
 * The exclusive section the TypeORM store runs its operations in: none on PostgreSQL or MySQL, the
 * application's serializer when it passes one (`runExclusive`), or else a queue private to the
 * store, so that operations on sql.js's single connection never overlap.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Dialect } from './idempotency-records.sql.js';

/** Runs `work` alone on the database (see `TypeOrmIdempotencyStoreOptions.runExclusive`). @internal */
export type RunExclusive = <T>(work: () => Promise<T>) => Promise<T>;

/** @internal */
export function exclusiveSectionFor(dialect: Dialect, runExclusive: RunExclusive | undefined): RunExclusive {
  if (dialect !== 'sqlite') return (work) => work();
  if (runExclusive) return runExclusive;
  const queue = new ExclusiveQueue();
  return (work) => queue.run(work);
}

/**
 * A queue of exclusive sections: one section runs at a time, in call order. A call made from
 * inside a running section (same async context) runs at once, so work inside `transaction()`
 * may use the store. A section's context is closed when it ends: a timer it started that fires
 * later waits in line like everyone else.
 */
class ExclusiveQueue {
  private readonly section = new AsyncLocalStorage<{ open: boolean }>();
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(work: () => Promise<T>): Promise<T> {
    if (this.section.getStore()?.open) return work();
    const context = { open: true };
    const run = this.tail
      .then(() => this.section.run(context, work))
      .finally(() => {
        context.open = false;
      });
    this.tail = run.catch(() => undefined);
    return run;
  }
}
