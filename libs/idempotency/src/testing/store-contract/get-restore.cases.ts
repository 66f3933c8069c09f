import type { IdempotencyRecord } from '../../interfaces/idempotency-record.interface.js';
import type { IdempotencyStore } from '../../stores/idempotency-store.js';
import { commonGetCases } from '../common-cases.js';
import { expect } from '../contract-expect.js';
import {
  claimRequest,
  LONG_MS,
  newFingerprint,
  newId,
  newToken,
  NON_UTF8_BODY,
  sampleResponse,
  sleep,
} from '../contract-fixtures.js';
import { type ContractTestRunner } from '../contract-runner.js';
import { CLOCK_SLACK_MS, SHORT_MS, type StoreSuite } from './store-suite.js';

/**
 * The fast-tier contract's `get` and `restore` cases: reading records (copies, expiry), and
 * writing back a record the durable tier holds.
 *
 * @internal
 */

/** `get`: absent and expired keys, and copies that cannot change what is stored. */
export function describeGet({ describe, it, beforeEach }: ContractTestRunner, suite: StoreSuite): void {
  const { claimed, completed } = suite;
  describe('get', () => {
    let store: IdempotencyStore;
    beforeEach(() => {
      store = suite.store();
    });

    commonGetCases(it, suite);

    it('returns undefined once the record expired, in progress or completed', async () => {
      const a = newId();
      const b = newId();
      await claimed(a, { ttlMs: SHORT_MS });
      const record = await claimed(b, { ttlMs: SHORT_MS });
      expect(await store.complete(b, record.ownerToken, sampleResponse())).toBe(true);
      expect(await store.get(a)).toBeDefined();
      await sleep(SHORT_MS + 20);
      expect(await store.get(a)).toBeUndefined();
      expect(await store.get(b)).toBeUndefined();
    });

    it('returns copies: mutating a returned record, its headers or its body changes nothing stored', async () => {
      const key = newId();
      const record = await completed(key);
      const copy = await store.get(key);
      copy!.ownerToken = 'mutated';
      copy!.fencingToken = 99;
      copy!.response!.statusCode = 500;
      (copy!.response!.headers.link as string[]).push('</c>');
      copy!.response!.headers['x-new'] = '1';
      copy!.response!.body![0] = 0x41;
      expect(await store.get(key)).toEqual(record);
    });

    it('returns copies from claim and takeOver too', async () => {
      const key = newId();
      const result = await store.claim(key, claimRequest());
      const snapshot = { ...result.record };
      result.record.ownerToken = 'mutated';
      result.record.leaseExpiresAtMs = 0;
      expect(await store.get(key)).toEqual(snapshot);
    });

    it('keeps its own copy of what it was given: mutating the response after complete changes nothing', async () => {
      const key = newId();
      const record = await claimed(key);
      const response = sampleResponse();
      expect(await store.complete(key, record.ownerToken, response)).toBe(true);
      response.body![0] = 0x41;
      (response.headers.link as string[]).push('</c>');
      response.headers['x-new'] = '1';
      expect((await store.get(key))?.response).toEqual(sampleResponse());
    });
  });
}

/** `restore`: a durable record written back as it is, never over a live one. */
export function describeRestore({ describe, it, beforeEach }: ContractTestRunner, suite: StoreSuite): void {
  const { claimed } = suite;
  describe('restore', () => {
    let store: IdempotencyStore;
    beforeEach(() => {
      store = suite.store();
    });

    function durableRecord(overrides: Partial<IdempotencyRecord> = {}): IdempotencyRecord {
      const now = Date.now();
      return {
        state: 'completed',
        fingerprint: newFingerprint(),
        ownerToken: newToken(),
        fencingToken: 3,
        createdAtMs: now - 10_000,
        leaseExpiresAtMs: now - 5_000,
        expiresAtMs: now + LONG_MS,
        response: sampleResponse(),
        ...overrides,
      };
    }

    it('writes a completed record as it is when the key is absent', async () => {
      const key = newId();
      const record = durableRecord();
      expect(await store.restore(key, record)).toBe(true);
      expect(await store.get(key)).toEqual(record);
      const replayed = await store.claim(key, claimRequest());
      expect(replayed).toEqual({ kind: 'existing', record, nowMs: expect.any(Number) });
    });

    it('writes an in-progress record as it is, and its owner can complete it', async () => {
      const key = newId();
      const now = Date.now();
      const { response: _omitted, ...fields } = durableRecord({ leaseExpiresAtMs: now + LONG_MS });
      const record: IdempotencyRecord = { ...fields, state: 'in_progress' };
      expect(await store.restore(key, record)).toBe(true);
      expect(await store.get(key)).toEqual(record);
      expect(await store.complete(key, record.ownerToken, sampleResponse())).toBe(true);
    });

    it('writes nothing and returns false when a live record exists', async () => {
      const key = newId();
      const existing = await claimed(key);
      expect(await store.restore(key, durableRecord())).toBe(false);
      expect(await store.get(key)).toEqual(existing);
    });

    it('writes over an expired record', async () => {
      const key = newId();
      await claimed(key, { ttlMs: SHORT_MS });
      await sleep(SHORT_MS + 20);
      const record = durableRecord();
      expect(await store.restore(key, record)).toBe(true);
      expect(await store.get(key)).toEqual(record);
    });

    it('writes nothing and returns false for a record that is already expired', async () => {
      const key = newId();
      expect(await store.restore(key, durableRecord({ expiresAtMs: Date.now() - 1_000 }))).toBe(false);
      expect(await store.get(key)).toBeUndefined();
      expect((await store.claim(key, claimRequest())).kind).toBe('claimed');
    });

    it('lets the restored record expire at its own expiresAtMs', async () => {
      const key = newId();
      expect(await store.restore(key, durableRecord({ expiresAtMs: Date.now() + 150 }))).toBe(true);
      expect(await store.get(key)).toBeDefined();
      await sleep(150 + CLOCK_SLACK_MS);
      expect(await store.get(key)).toBeUndefined();
    });

    it('keeps its own copy of the record it was given', async () => {
      const key = newId();
      const record = durableRecord();
      expect(await store.restore(key, record)).toBe(true);
      record.response!.body![0] = 0x41;
      record.ownerToken = 'mutated';
      expect((await store.get(key))?.response?.body?.equals(NON_UTF8_BODY)).toBe(true);
      expect((await store.get(key))?.ownerToken).not.toBe('mutated');
    });

    it('rejects a completed record without a response, and one with fencing token 0', async () => {
      await expect(store.restore(newId(), durableRecord({ response: undefined }))).rejects.toThrow(TypeError);
      await expect(store.restore(newId(), durableRecord({ fencingToken: 0 }))).rejects.toThrow(RangeError);
    });
  });
}
