import { DurableIdempotencyStore } from '../stores/durable-idempotency-store.js';
import { IdempotencyReaper } from './idempotency-reaper.js';

/** Counts `deleteExpired` calls; pretends `remaining` expired rows exist. */
class CountingStore extends DurableIdempotencyStore {
  calls: Array<[number, number | undefined]> = [];
  constructor(private remaining: number) {
    super();
  }
  async deleteExpired(batchSize: number, nowMs?: number): Promise<number> {
    this.calls.push([batchSize, nowMs]);
    const deleted = Math.min(batchSize, this.remaining);
    this.remaining -= deleted;
    return deleted;
  }
  claim = () => Promise.reject(new Error('unused'));
  takeOver = () => Promise.reject(new Error('unused'));
  complete = () => Promise.reject(new Error('unused'));
  release = () => Promise.reject(new Error('unused'));
  extend = () => Promise.reject(new Error('unused'));
  get = () => Promise.reject(new Error('unused'));
  transaction = () => Promise.reject(new Error('unused'));
}

describe('IdempotencyReaper', () => {
  it('deletes in batches until a batch comes back short, at one point in time', async () => {
    const store = new CountingStore(1250);
    const reaper = new IdempotencyReaper({ reaper: { batchSize: 500 } }, store);
    expect(await reaper.sweep(42)).toBe(1250);
    expect(store.calls).toEqual([
      [500, 42],
      [500, 42],
      [500, 42],
    ]);
  });

  it('runs one sweep at a time: a second call joins the running one', async () => {
    const store = new CountingStore(10);
    const reaper = new IdempotencyReaper({ reaper: { batchSize: 100 } }, store);
    const [a, b] = await Promise.all([reaper.sweep(1), reaper.sweep(1)]);
    expect([a, b]).toEqual([10, 10]);
    expect(store.calls).toHaveLength(1);
  });

  it("without a time, leaves expiry to the store's clock (the database's), not this host's", async () => {
    const store = new CountingStore(3);
    expect(await new IdempotencyReaper({ reaper: { batchSize: 10 } }, store).sweep()).toBe(3);
    expect(store.calls).toEqual([[10, undefined]]);
  });

  it('does nothing without a durable store', async () => {
    expect(await new IdempotencyReaper({ reaper: {} }, null).sweep()).toBe(0);
  });

  it('sweeps on its interval only when the reaper option is set, and stops on shutdown', async () => {
    const enabledStore = new CountingStore(5);
    const disabledStore = new CountingStore(5);
    const enabled = new IdempotencyReaper({ reaper: { intervalMs: 10 } }, enabledStore);
    const disabled = new IdempotencyReaper({}, disabledStore);
    enabled.onApplicationBootstrap();
    disabled.onApplicationBootstrap();
    await new Promise((r) => setTimeout(r, 60));
    await enabled.onApplicationShutdown();
    await disabled.onApplicationShutdown();
    const callsAtShutdown = enabledStore.calls.length;
    expect(callsAtShutdown).toBeGreaterThan(0);
    expect(disabledStore.calls).toHaveLength(0);
    await new Promise((r) => setTimeout(r, 40));
    expect(enabledStore.calls).toHaveLength(callsAtShutdown);
  });

  it('a store error stops the sweep and is reported to the caller', async () => {
    const store = new CountingStore(0);
    store.deleteExpired = () => Promise.reject(new Error('database gone'));
    await expect(new IdempotencyReaper({ reaper: {} }, store).sweep()).rejects.toThrow('database gone');
  });
});
