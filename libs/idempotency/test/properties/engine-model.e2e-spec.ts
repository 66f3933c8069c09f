import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import {
  IdempotencyRunError,
  IdempotencyStore,
  MemoryIdempotencyStore,
  type ClaimRequest,
  type ClaimResult,
  type IdempotencyRecord,
  type StoredResponse,
} from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { sleep } from '../../../../test/support/timing.js';
import { connectRedisOrFail, deleteKeys, openRedis, redisUrl } from '../../../../test/support/servers/redis.js';
import { emptyModel, engineCommands, modelEngine, type Real } from './engine-model.js';

/**
 * The engine against a pure reference model of the state machine (docs/contract.md B.5, B.7, B.9):
 * random sequences of begin, finish (stored or released outcomes, oversized bodies), abandon,
 * crashes and lease expiry, with every answer compared to the model's. The key properties: a
 * claim is granted only when no live handler holds the record, and a replay returns the stored
 * outcome.
 */
describe('engine vs the reference model', () => {
  // Lost claims are logged as warnings by design; here they are expected answers.
  beforeAll(() => Logger.overrideLogger(false));
  afterAll(() => Logger.overrideLogger(['log', 'error', 'warn']));

  describe('on the memory store, with the store clock under fake timers', () => {
    beforeEach(() => {
      jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
    });
    afterEach(() => {
      jest.useRealTimers();
    });

    it('every answer matches the model', async () => {
      const seen = new Set<string>();
      await fc.assert(
        fc.asyncProperty(fc.commands(engineCommands(), { maxCommands: 30, size: 'max' }), async (commands) => {
          const store = new MemoryIdempotencyStore();
          const { service, policy } = modelEngine(store, { leaseMs: 30_000, heartbeatMs: 10_000, ttlMs: 86_400_000 });
          const real: Real = {
            service,
            policy,
            operation: 'memory-model',
            claims: [],
            seen,
            elapse: async () => {
              await jest.advanceTimersByTimeAsync(policy.leaseMs + 1);
            },
          };
          try {
            await fc.asyncModelRun(() => ({ model: emptyModel(), real }), commands);
          } finally {
            service.onApplicationShutdown();
            store.onApplicationShutdown();
          }
        }),
        { numRuns: 150 },
      );
      expect([...seen].sort()).toEqual(
        [
          'claimed',
          'in-progress',
          'lost',
          'mismatch',
          'released',
          'replay',
          'replay-unavailable',
          'stored',
          'takeover',
        ].sort(),
      );
    });
  });

  describe('on real Redis, with real leases and heartbeats', () => {
    const prefix = `idem-props-${randomUUID().slice(0, 8)}`;
    let store: RedisIdempotencyStore;

    beforeAll(async () => {
      await connectRedisOrFail();
      store = new RedisIdempotencyStore(redisUrl(), { prefix });
      await store.onModuleInit();
    });
    afterAll(async () => {
      const client = await openRedis();
      await deleteKeys(client, `${prefix}:`);
      await client.quit();
      await store?.onApplicationShutdown();
    });

    it('every answer matches the model', async () => {
      let run = 0;
      await fc.assert(
        fc.asyncProperty(fc.commands(engineCommands(), { maxCommands: 12, size: 'max' }), async (commands) => {
          // Renewals every 250 ms keep a live claim alive with 750 ms of slack on a busy machine.
          const { service, policy } = modelEngine(store, { leaseMs: 1_000, heartbeatMs: 250, ttlMs: 60_000 });
          const real: Real = {
            service,
            policy,
            operation: `redis-model-${(run += 1)}`,
            claims: [],
            seen: new Set(),
            elapse: async () => {
              await sleep(policy.leaseMs + 250);
            },
          };
          try {
            await fc.asyncModelRun(() => ({ model: emptyModel(), real }), commands);
          } finally {
            service.onApplicationShutdown();
          }
        }),
        { numRuns: 5 },
      );
    }, 90_000);
  });
});

/** A store whose every operation waits for the scheduler's go, so concurrent calls interleave at random. */
class InterleavedStore extends IdempotencyStore {
  constructor(
    private readonly inner: IdempotencyStore,
    private readonly scheduler: fc.Scheduler,
  ) {
    super();
  }
  private async step<T>(label: string, operation: () => Promise<T>): Promise<T> {
    await this.scheduler.schedule(Promise.resolve(label), label);
    return operation();
  }
  claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    return this.step('claim', () => this.inner.claim(key, request));
  }
  takeOver(key: string, owner: string, request: ClaimRequest): Promise<ClaimResult> {
    return this.step('takeOver', () => this.inner.takeOver(key, owner, request));
  }
  complete(key: string, owner: string, response: StoredResponse): Promise<boolean> {
    return this.step('complete', () => this.inner.complete(key, owner, response));
  }
  release(key: string, owner: string): Promise<boolean> {
    return this.step('release', () => this.inner.release(key, owner));
  }
  extend(key: string, owner: string, leaseMs: number): Promise<boolean> {
    return this.step('extend', () => this.inner.extend(key, owner, leaseMs));
  }
  get(key: string): Promise<IdempotencyRecord | undefined> {
    return this.step('get', () => this.inner.get(key));
  }
  restore(key: string, record: IdempotencyRecord): Promise<boolean> {
    return this.step('restore', () => this.inner.restore(key, record));
  }
}

describe('concurrent run() calls under random interleavings of store operations', () => {
  it('the function runs once per key; every other call replays its value, or is told in-progress or key-reused', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.scheduler(),
        fc.array(fc.constantFrom('a', 'b'), { minLength: 2, maxLength: 5 }),
        async (scheduler, payloads) => {
          const memory = new MemoryIdempotencyStore();
          const { service } = modelEngine(new InterleavedStore(memory, scheduler), {});
          let executions = 0;
          const calls = payloads.map((payload) =>
            service
              .run({ operation: 'pay', key: 'same-key', fingerprint: payload }, async () => {
                executions += 1;
                await scheduler.schedule(Promise.resolve('handler'), `handler ${payload}`);
                return { paid: payload };
              })
              .then(
                (result) => ({ payload, result }),
                (error: unknown) => ({ payload, error }),
              ),
          );
          const outcomes = await scheduler.waitFor(Promise.all(calls));
          service.onApplicationShutdown();
          memory.onApplicationShutdown();

          expect(executions).toBe(1);
          const fresh = outcomes.filter((o) => 'result' in o && o.result.status === 'fresh');
          expect(fresh).toHaveLength(1);
          const winner = fresh[0].payload;
          for (const outcome of outcomes) {
            if ('result' in outcome) {
              expect(outcome.payload).toBe(winner);
              expect(outcome.result.value).toEqual({ paid: winner });
              continue;
            }
            expect(outcome.error).toBeInstanceOf(IdempotencyRunError);
            const kind = (outcome.error as IdempotencyRunError).kind;
            expect(kind).toBe(outcome.payload === winner ? 'in-progress' : 'key-reused');
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});
