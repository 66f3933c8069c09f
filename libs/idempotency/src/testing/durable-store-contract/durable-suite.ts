import type { StoredResponse } from '../../interfaces/idempotency-record.interface.js';
import type { DurableIdempotencyStore, DurableTransaction } from '../../stores/durable-idempotency-store.js';
import type { CommonCaseContext } from '../common-cases.js';
import { sampleResponse as commonSampleResponse } from '../contract-fixtures.js';

/**
 * What a durable store gives its contract suite (`DurableStoreUnderTest`, the row damages it
 * must know how to stage), and what the durable-tier cases share: their timing, their sample
 * response, and the suite as they see it.
 */

/**
 * The durable-tier contract (`DurableIdempotencyStore`, DESIGN "Durable tier" and "The flow of one
 * request" steps 4, 6 and 7), as a suite any implementation must pass. Real timers and short
 * TTLs: leases and expiry are measured by the application's clock, never faked.
 *
 * @publicApi
 */
export interface DurableStoreUnderTest {
  /** A store on an empty table. */
  store: DurableIdempotencyStore;
  /**
   * Another store on the same database, as a second instance of the application would have one
   * (with its own options). Where one process owns the database (sql.js), it may share `store`'s
   * serialization or be `store` itself.
   */
  anotherInstance(options?: { lockTimeoutMs?: number }): DurableIdempotencyStore;
  /** Writes one row of a business table through the handle `transaction()` gave to its work. */
  writeBusinessRow(transaction: DurableTransaction, id: string): Promise<void>;
  /** Whether a business row was committed. Called only while no store operation runs. */
  businessRowExists(id: string): Promise<boolean>;
  /** Rows physically in the durable table, expired ones included. Called only while no store operation runs. */
  countRows(): Promise<number>;
  /** Overwrites stored columns of `key` so that the row is unreadable in the way `damage` names. */
  damage(key: string, damage: RowDamage): Promise<void>;
  /**
   * How the store keeps a takeover from running beside a live transaction: PostgreSQL row locks
   * (a takeover waits at most `lockTimeoutMs`, the value `anotherInstance` is given), or one
   * exclusive section for everything (SQLite).
   */
  locking: 'row-locks' | 'exclusive';
  /** Closes what the factory opened and removes the rows the test wrote. */
  cleanup(): Promise<void>;
}

/**
 * Ways a row can be unreadable that every SQL database can hold, each with what `transaction()`
 * answers for it: a row that is no longer `in_progress` under our token (a completed row, an
 * unknown state, a blank owner) is not ours to lock, so the claim is lost; a row that is ours
 * but unreadable is a store error.
 *
 * @publicApi
 */
export const ROW_DAMAGES = {
  'unknown state': 'claim-lost',
  'fencing token 0': 'store-error',
  'lease beyond 2^53 (not a safe integer)': 'store-error',
  'empty owner token': 'claim-lost',
  'in-progress row holding a response': 'store-error',
  'completed row whose headers are not JSON': 'claim-lost',
  'completed row whose headers are a JSON array': 'claim-lost',
  'completed row with status code 42': 'claim-lost',
} as const;
/** @publicApi */
export type RowDamage = keyof typeof ROW_DAMAGES;

/** Lifetimes short enough to watch expire, long enough for a claim and a write on a busy sql.js. @internal */
export const SHORT_MS = 100;

/**
 * The common sample response plus a header with quotes and a backslash (escaping in SQL and
 * JSON), `overrides` applied.
 *
 * @internal
 */
export function sampleResponse(overrides: Partial<StoredResponse> = {}): StoredResponse {
  const common = commonSampleResponse();
  return { ...common, headers: { ...common.headers, 'x-quote': 'a "quoted" \\ value' }, ...overrides };
}

/** The durable-tier suite as its cases see it: the harness and the store of the running test. @internal */
export interface DurableSuite extends CommonCaseContext {
  harness(): DurableStoreUnderTest;
  store(): DurableIdempotencyStore;
  /** `DurableContractOptions.claimIsolation`. */
  claimIsolation: 'any' | 'read-committed';
}
