import type { ClaimRequest, ForceDeleteScope, InProgressEntry } from '../stores/idempotency-store.js';
import { expect } from './contract-expect.js';
import { sleep } from './contract-fixtures.js';

/** The inspection methods both store contracts share (`IdempotencyStore`, `DurableIdempotencyStore`). */
interface InspectableStore {
  listInProgress(olderThanMs: number, limit: number): Promise<InProgressEntry[]>;
  forceDelete(key: string, scope?: ForceDeleteScope): Promise<boolean>;
  ping(): Promise<void>;
}

/** Checks shared by both contract suites: refused arguments, an absent key, a ping. */
export async function expectInspectionBasics(store: InspectableStore, absentKey: string): Promise<void> {
  await expect(store.listInProgress(-1, 10)).rejects.toThrow(RangeError);
  await expect(store.listInProgress(0, 0)).rejects.toThrow(RangeError);
  await expect(store.listInProgress(0, 1_001)).rejects.toThrow(RangeError);
  expect(await store.forceDelete(absentKey, 'any')).toBe(false);
  await expect(store.forceDelete(absentKey, 'everything' as never)).rejects.toThrow(TypeError);
  await expect(store.ping()).resolves.toBeUndefined();
}

/** How a contract suite writes records for {@link expectListingOldestFirst}. */
export interface RecordWriter {
  newId(): string;
  claimed(key: string, overrides?: Partial<ClaimRequest>): Promise<unknown>;
  completed(key: string): Promise<unknown>;
}

/**
 * `listInProgress` answers the live in-progress records at least `olderThanMs` old by the
 * store's clock, oldest first, up to `limit`: never a completed or an expired one.
 */
export async function expectListingOldestFirst(store: InspectableStore, write: RecordWriter): Promise<void> {
  const oldest = write.newId();
  const older = write.newId();
  await write.claimed(oldest);
  await sleep(5);
  await write.claimed(older);
  await write.completed(write.newId());
  await write.claimed(write.newId(), { leaseMs: 20, ttlMs: 40 });
  await sleep(250);
  const young = write.newId();
  await write.claimed(young);
  const stale = await store.listInProgress(200, 10);
  expect(stale.map((entry) => entry.key)).toEqual([oldest, older]);
  for (const entry of stale) {
    expect(entry.record.state).toBe('in_progress');
    expect(entry.nowMs - entry.record.createdAtMs).toBeGreaterThanOrEqual(200);
  }
  expect((await store.listInProgress(0, 10)).map((entry) => entry.key)).toEqual([oldest, older, young]);
  expect((await store.listInProgress(0, 1)).map((entry) => entry.key)).toEqual([oldest]);
}
