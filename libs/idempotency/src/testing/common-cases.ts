import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type { ClaimRequest, IdempotencyStore } from '../stores/idempotency-store.js';
import { expect } from './contract-expect.js';
import { claimRequest, LONG_MS, newId, newToken, sleep } from './contract-fixtures.js';
import type { ContractTestRunner } from './contract-runner.js';
import { expectInspectionBasics } from './inspection-checks.js';

/**
 * The cases both contract suites run, the fast tier's (`IdempotencyStore`) and the durable
 * tier's (`DurableIdempotencyStore`): each suite registers them inside its own `describe` blocks,
 * so a case keeps its full name in both. A suite that needs a case to check more (or otherwise)
 * keeps its own version instead.
 *
 * @internal
 */

/** The operations of a store that both tiers have, with the same meaning. */
export type ContractStore = Pick<
  IdempotencyStore,
  'claim' | 'takeOver' | 'complete' | 'release' | 'extend' | 'get' | 'listInProgress' | 'forceDelete' | 'ping'
>;

/** What a suite hands the common cases. Getters: the suite makes a new store before every test. */
export interface CommonCaseContext {
  /** The store of the running test. */
  store(): ContractStore;
  /** Where a takeover comes from: another instance on the durable tier, the store itself on the fast tier. */
  takeOverStore(): ContractStore;
  /** Claims `key` (fails the test unless the claim is granted) and returns the record. */
  claimed(key: string, overrides?: Partial<ClaimRequest>): Promise<IdempotencyRecord>;
  /** Claims and completes `key` (with the suite's sample response by default), and returns the stored record. */
  completed(key: string, response?: StoredResponse): Promise<IdempotencyRecord>;
  /** The suite's sample response, `overrides` applied. */
  sampleResponse(overrides?: Partial<StoredResponse>): StoredResponse;
  /** What the suite's titles call a stored entry: `record` (fast tier) or `row` (durable tier). */
  noun: 'record' | 'row';
  /** A lifetime short enough to watch expire, in ms. */
  shortMs: number;
  /** Rows physically stored, expired ones included (durable tier); without it, `get` tells what was written. */
  countRows?(): Promise<number>;
}

type It = ContractTestRunner['it'];

/** `claim`: an existing record is answered, never overwritten; keys are independent. */
export function commonClaimCases(it: It, c: CommonCaseContext): void {
  it(`returns an existing completed ${c.noun} with its response`, async () => {
    const store = c.store();
    const key = newId();
    const record = await c.completed(key);
    expect(await store.claim(key, claimRequest())).toEqual({ kind: 'existing', record, nowMs: expect.any(Number) });
  });

  it(`returns an in-progress ${c.noun} whose lease lapsed as existing (recovery is takeOver, not claim)`, async () => {
    const store = c.store();
    const key = newId();
    const first = await c.claimed(key, { leaseMs: c.shortMs });
    await sleep(c.shortMs + 20);
    const result = await store.claim(key, claimRequest());
    expect(result).toEqual({ kind: 'existing', record: first, nowMs: expect.any(Number) });
    if (result.kind === 'existing') expect(result.nowMs).toBeGreaterThanOrEqual(first.leaseExpiresAtMs);
  });

  it('keeps keys apart', async () => {
    const store = c.store();
    const a = newId();
    await c.claimed(a);
    expect((await store.claim(newId(), claimRequest())).kind).toBe('claimed');
    if (c.countRows) expect(await c.countRows()).toBe(2);
  });
}

/** `takeOver`: only a lapsed lease, only with the right token, and the old owner is fenced out. */
export function commonTakeOverCases(it: It, c: CommonCaseContext): void {
  it('takes over a lapsed lease with the right token: new owner and fingerprint, fencing + 1, createdAt kept', async () => {
    const store = c.store();
    const key = newId();
    const first = await c.claimed(key, { leaseMs: c.shortMs });
    await sleep(c.shortMs + 20);
    const request = claimRequest({ leaseMs: 5_000, ttlMs: 90_000 });
    const result = await c.takeOverStore().takeOver(key, first.ownerToken, request);
    expect(result.kind).toBe('claimed');
    const { record } = result;
    const now = record.leaseExpiresAtMs - 5_000;
    expect(record).toEqual({
      state: 'in_progress',
      fingerprint: request.fingerprint,
      ownerToken: request.ownerToken,
      fencingToken: 2,
      createdAtMs: first.createdAtMs,
      leaseExpiresAtMs: now + 5_000,
      expiresAtMs: now + 90_000,
    });
    expect(now).toBeGreaterThanOrEqual(first.leaseExpiresAtMs);
    expect(await store.get(key)).toEqual(record);
  });

  it('counts fencing tokens up over successive takeovers', async () => {
    const store = c.store();
    const key = newId();
    let owner = (await c.claimed(key, { leaseMs: c.shortMs })).ownerToken;
    for (const expected of [2, 3]) {
      await sleep(c.shortMs + 20);
      const result = await store.takeOver(key, owner, claimRequest({ leaseMs: c.shortMs }));
      expect(result.kind).toBe('claimed');
      expect(result.record.fencingToken).toBe(expected);
      owner = result.record.ownerToken;
    }
  });

  it(`returns the ${c.noun} unchanged when the expected token is wrong`, async () => {
    const store = c.store();
    const key = newId();
    const first = await c.claimed(key, { leaseMs: c.shortMs });
    await sleep(c.shortMs + 20);
    const result = await store.takeOver(key, newToken(), claimRequest());
    expect(result).toEqual({ kind: 'existing', record: first, nowMs: expect.any(Number) });
    expect(await store.get(key)).toEqual(first);
  });

  it(`returns a completed ${c.noun} unchanged, even with the right token`, async () => {
    const store = c.store();
    const key = newId();
    const record = await c.completed(key);
    const result = await store.takeOver(key, record.ownerToken, claimRequest());
    expect(result).toEqual({ kind: 'existing', record, nowMs: expect.any(Number) });
  });

  it('fences the old owner out: its complete, release and extend return false and change nothing', async () => {
    const store = c.store();
    const key = newId();
    const zombie = await c.claimed(key, { leaseMs: c.shortMs });
    await sleep(c.shortMs + 20);
    const taken = await store.takeOver(key, zombie.ownerToken, claimRequest());
    expect(taken.kind).toBe('claimed');
    expect(await store.complete(key, zombie.ownerToken, c.sampleResponse())).toBe(false);
    expect(await store.extend(key, zombie.ownerToken, LONG_MS)).toBe(false);
    expect(await store.release(key, zombie.ownerToken)).toBe(false);
    expect(await store.get(key)).toEqual(taken.record);
  });
}

/** `complete`: only the owner of a live in-progress record completes it, once. */
export function commonCompleteCases(it: It, c: CommonCaseContext): void {
  it('stores bodyOmitted (a body too large or streamed) without a body', async () => {
    const stored = await c.completed(newId(), { statusCode: 201, headers: { location: '/x' }, bodyOmitted: true });
    expect(stored.response).toEqual({ statusCode: 201, headers: { location: '/x' }, bodyOmitted: true });
    expect(stored.response?.body).toBeUndefined();
  });

  it('returns false and changes nothing for a non-owner', async () => {
    const store = c.store();
    const key = newId();
    const record = await c.claimed(key);
    expect(await store.complete(key, newToken(), c.sampleResponse())).toBe(false);
    expect(await store.get(key)).toEqual(record);
  });

  it(`returns false for a ${c.noun} that is already completed, keeping the first response`, async () => {
    const store = c.store();
    const key = newId();
    const record = await c.completed(key);
    expect(await store.complete(key, record.ownerToken, c.sampleResponse({ statusCode: 500 }))).toBe(false);
    expect(await store.get(key)).toEqual(record);
  });

  it('returns false for an absent key and writes nothing', async () => {
    const store = c.store();
    const key = newId();
    expect(await store.complete(key, newToken(), c.sampleResponse())).toBe(false);
    if (c.countRows) expect(await c.countRows()).toBe(0);
    else expect(await store.get(key)).toBeUndefined();
  });

  it(`returns false once the ${c.noun} expired, and does not bring it back`, async () => {
    const store = c.store();
    const key = newId();
    const record = await c.claimed(key, { ttlMs: c.shortMs });
    await sleep(c.shortMs + 20);
    expect(await store.complete(key, record.ownerToken, c.sampleResponse())).toBe(false);
    expect(await store.get(key)).toBeUndefined();
  });

  it('completes after the lease lapsed when nobody took over (fencing is by token, not by time)', async () => {
    const store = c.store();
    const key = newId();
    const record = await c.claimed(key, { leaseMs: c.shortMs });
    await sleep(c.shortMs + 20);
    expect(await store.complete(key, record.ownerToken, c.sampleResponse())).toBe(true);
  });

  it('rejects a status code outside 100–999 with a RangeError and changes nothing', async () => {
    const store = c.store();
    const key = newId();
    const record = await c.claimed(key);
    await expect(store.complete(key, record.ownerToken, c.sampleResponse({ statusCode: 42 }))).rejects.toThrow(
      RangeError,
    );
    expect(await store.get(key)).toEqual(record);
  });
}

/** `extend`: a live claim never expires; the lease is checked. */
export function commonExtendCases(it: It, c: CommonCaseContext): void {
  it('pushes expiresAt to the new lease when the lease would outlive the TTL (a live claim never expires)', async () => {
    const store = c.store();
    const key = newId();
    const record = await c.claimed(key, { leaseMs: 200, ttlMs: 400 });
    expect(await store.extend(key, record.ownerToken, 10_000)).toBe(true);
    const renewed = await store.get(key);
    expect(renewed!.expiresAtMs).toBe(renewed!.leaseExpiresAtMs);
    await sleep(450); // past the original TTL
    expect((await store.get(key))?.ownerToken).toBe(record.ownerToken);
    expect((await store.claim(key, claimRequest())).kind).toBe('existing');
  });

  it('rejects a non-positive leaseMs with a RangeError', async () => {
    const store = c.store();
    const key = newId();
    const record = await c.claimed(key);
    await expect(store.extend(key, record.ownerToken, 0)).rejects.toThrow(RangeError);
    expect(await store.get(key)).toEqual(record);
  });
}

/** `get`. */
export function commonGetCases(it: It, c: CommonCaseContext): void {
  it('returns undefined for an absent key', async () => {
    expect(await c.store().get(newId())).toBeUndefined();
  });
}

/** Inspection and repair: arguments refused, an absent key, a ping. */
export function commonInspectionCases(it: It, c: CommonCaseContext): void {
  it('refuses a negative age, a limit outside 1..1000 and an unknown scope; false for an absent key; answers a ping', async () => {
    await expectInspectionBasics(c.store(), newId());
  });
}
