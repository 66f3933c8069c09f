import { MemoryIdempotencyStore } from './memory-idempotency.store.js';
import type { ClaimRequest } from './idempotency-store.js';

/** The contract itself is tested in libs/idempotency/test/stores.e2e-spec.ts; these are memory-only concerns. */

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
let counter = 0;
const request = (overrides: Partial<ClaimRequest> = {}): ClaimRequest => ({
  ownerToken: `owner-${++counter}`,
  fingerprint: 'fp',
  leaseMs: 60_000,
  ttlMs: 60_000,
  ...overrides,
});
/** The sweep timer, for the checks a public API cannot show. */
const sweepTimerOf = (store: MemoryIdempotencyStore): NodeJS.Timeout | undefined =>
  (store as unknown as { sweepTimer?: NodeJS.Timeout }).sweepTimer;
/** Timers that keep the process alive (unref'd ones are not listed). */
const liveTimers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

describe('MemoryIdempotencyStore', () => {
  let store: MemoryIdempotencyStore;
  afterEach(() => store?.onApplicationShutdown());

  it('rejects a sweep interval that is not a positive number', () => {
    for (const sweepIntervalMs of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => new MemoryIdempotencyStore({ sweepIntervalMs })).toThrow(RangeError);
    }
  });

  it('starts no timer until it holds a record, and its sweep timer never keeps the process alive', async () => {
    store = new MemoryIdempotencyStore();
    expect(sweepTimerOf(store)).toBeUndefined();
    const before = liveTimers();
    await store.claim('a', request());
    expect(sweepTimerOf(store)?.hasRef()).toBe(false);
    expect(liveTimers()).toBe(before);
  });

  it('never keeps the process alive while a waiter waits', async () => {
    store = new MemoryIdempotencyStore();
    await store.claim('a', request());
    const before = liveTimers();
    const waiting = store.waitForChange('a', 60_000);
    expect(liveTimers()).toBe(before);
    store.onApplicationShutdown();
    await waiting;
  });

  it('sweeps expired records without being read, then stops its timer while empty', async () => {
    store = new MemoryIdempotencyStore({ sweepIntervalMs: 20 });
    await store.claim('short', request({ ttlMs: 30 }));
    await store.claim('also-short', request({ ttlMs: 30 }));
    expect(store.size).toBe(2);
    await sleep(90);
    expect(store.size).toBe(0);
    expect(sweepTimerOf(store)).toBeUndefined();
    await store.claim('again', request());
    expect(sweepTimerOf(store)).toBeDefined();
  });

  it('keeps live records when it sweeps', async () => {
    store = new MemoryIdempotencyStore({ sweepIntervalMs: 20 });
    await store.claim('short', request({ ttlMs: 30 }));
    await store.claim('long', request());
    await sleep(90);
    expect(store.size).toBe(1);
    expect(await store.get('long')).toBeDefined();
  });

  it('drops an expired record as soon as a read finds it, before any sweep', async () => {
    store = new MemoryIdempotencyStore();
    await store.claim('a', request({ ttlMs: 20 }));
    await sleep(40);
    expect(store.size).toBe(1);
    expect(await store.get('a')).toBeUndefined();
    expect(store.size).toBe(0);
  });

  it('clears the sweep timer on shutdown, does not start it again, and keeps records readable', async () => {
    store = new MemoryIdempotencyStore();
    await store.claim('a', request());
    store.onApplicationShutdown();
    expect(sweepTimerOf(store)).toBeUndefined();
    await store.claim('b', request());
    expect(sweepTimerOf(store)).toBeUndefined();
    expect(await store.get('a')).toBeDefined();
  });

  it('wakes pending waiters on shutdown and answers later waits at once', async () => {
    store = new MemoryIdempotencyStore();
    await store.claim('a', request());
    const started = performance.now();
    const waiting = Promise.all([store.waitForChange('a', 60_000), store.waitForChange('a', 60_000)]);
    store.onApplicationShutdown();
    await waiting;
    await store.waitForChange('a', 60_000);
    expect(performance.now() - started).toBeLessThan(100);
  });

  it('forgets a waiter that timed out, so a later change wakes only the current waiters', async () => {
    store = new MemoryIdempotencyStore();
    const { record } = await store.claim('a', request());
    await store.waitForChange('a', 10);
    expect((store as unknown as { waiters: Map<string, unknown> }).waiters.size).toBe(0);
    const waiting = store.waitForChange('a', 60_000);
    await store.release('a', record.ownerToken);
    await waiting;
    expect((store as unknown as { waiters: Map<string, unknown> }).waiters.size).toBe(0);
  });

  describe('caps (maxEntries, maxBytes)', () => {
    const response = (bytes: number) => ({ statusCode: 201, headers: {}, body: Buffer.alloc(bytes) });
    const complete = async (key: string, bytes = 10) => {
      const claim = request();
      await store.claim(key, claim);
      expect(await store.complete(key, claim.ownerToken, response(bytes))).toBe(true);
    };

    it('rejects caps that are not positive integers', () => {
      for (const value of [0, -1, 1.5, Number.NaN]) {
        expect(() => new MemoryIdempotencyStore({ maxEntries: value })).toThrow(RangeError);
        expect(() => new MemoryIdempotencyStore({ maxBytes: value })).toThrow(RangeError);
      }
    });

    it('past maxEntries, evicts completed records oldest first', async () => {
      store = new MemoryIdempotencyStore({ maxEntries: 3 });
      for (const key of ['a', 'b', 'c', 'd']) await complete(key);
      expect(store.size).toBe(3);
      expect(await store.get('a')).toBeUndefined();
      expect((await store.get('b'))?.state).toBe('completed');
      expect(store.evictions).toBe(1);
    });

    it('never evicts an in-progress record, even when only in-progress records are left', async () => {
      store = new MemoryIdempotencyStore({ maxEntries: 2 });
      await store.claim('running-1', request());
      await complete('done');
      await store.claim('running-2', request());
      await store.claim('running-3', request());
      expect(await store.get('done')).toBeUndefined();
      for (const key of ['running-1', 'running-2', 'running-3'])
        expect((await store.get(key))?.state).toBe('in_progress');
      expect(store.size).toBe(3);
    });

    it('past maxBytes, evicts completed records until the bytes fit, and counts what it frees', async () => {
      store = new MemoryIdempotencyStore({ maxBytes: 10_000 });
      await complete('big-1', 4_000);
      await complete('big-2', 4_000);
      expect(store.sizeBytes).toBeGreaterThan(8_000);
      await complete('big-3', 4_000);
      expect(await store.get('big-1')).toBeUndefined();
      expect((await store.get('big-3'))?.response?.body?.length).toBe(4_000);
      expect(store.sizeBytes).toBeLessThanOrEqual(10_000);
      await store.forceDelete('big-2', 'any');
      await store.forceDelete('big-3', 'any');
      expect(store.sizeBytes).toBe(0);
    });
  });
});
