/**
 * Small helpers around a TypeORM `QueryRunner` shared by the store's transactions (@internal).
 */
import type { QueryRunner } from 'typeorm';

/** Where the handler's writes begin in a route's transaction (PostgreSQL and SQLite spell it alike). */
const HANDLER_SAVEPOINT_NAME = 'idempotency_handler';
export const HANDLER_SAVEPOINT = `SAVEPOINT ${HANDLER_SAVEPOINT_NAME}`;
export const UNDO_HANDLER_WRITES = `ROLLBACK TO SAVEPOINT ${HANDLER_SAVEPOINT_NAME}`;

export async function rollbackQuietly(runner: QueryRunner): Promise<void> {
  // The original error is the one worth reporting; a failed rollback on a broken connection is
  // discarded with that connection by the pool.
  if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
}

export async function releaseQuietly(runner: QueryRunner): Promise<void> {
  await runner.release().catch(() => undefined);
}

/**
 * The runners of the transactions the store has open, by the handle it gave out and by claim
 * (`key`, owner token): `complete(…, transaction)` finds its connection through the first, the
 * owner's heartbeat renews through the second.
 */
export class OpenTransactions {
  private readonly byHandle = new WeakMap<object, QueryRunner>();
  private readonly byClaim = new Map<string, QueryRunner>();

  add(handle: object, key: string, ownerToken: string, runner: QueryRunner): void {
    this.byHandle.set(handle, runner);
    this.byClaim.set(claimId(key, ownerToken), runner);
  }

  remove(handle: object, key: string, ownerToken: string): void {
    this.byHandle.delete(handle);
    this.byClaim.delete(claimId(key, ownerToken));
  }

  runnerOf(handle: object): QueryRunner | undefined {
    return this.byHandle.get(handle);
  }

  runnerHolding(key: string, ownerToken: string): QueryRunner | undefined {
    return this.byClaim.get(claimId(key, ownerToken));
  }
}

function claimId(key: string, ownerToken: string): string {
  return `${key}\u0000${ownerToken}`;
}
