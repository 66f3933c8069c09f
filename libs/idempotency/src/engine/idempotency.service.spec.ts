import { IdempotencyClaimLostError } from '../errors/idempotency-claim-lost.error.js';
import { resolveModuleSettings, resolvePolicy } from '../idempotency.options.js';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import { DurableIdempotencyStore, type DurableTransaction } from '../stores/durable-idempotency-store.js';
import type { ClaimRequest, ClaimResult } from '../stores/idempotency-store.js';
import { MemoryIdempotencyStore } from '../stores/memory-idempotency.store.js';
import type { HandlerOutcome } from './idempotency-engine.types.js';
import { IdempotencyService } from './idempotency.service.js';
import { buildScopedKey } from './scoped-key.js';

/**
 * A durable store reduced to what the commit-time fence needs: every claim succeeds, and
 * `complete` inside a transaction answers what the test says, as the owner-token check would.
 */
class FencedDurableStore extends DurableIdempotencyStore {
  completeAnswer = true;
  readonly log: string[] = [];
  async claim(_key: string, request: ClaimRequest): Promise<ClaimResult> {
    const now = Date.now();
    const record: IdempotencyRecord = {
      state: 'in_progress',
      fingerprint: request.fingerprint,
      ownerToken: request.ownerToken,
      fencingToken: 1,
      createdAtMs: now,
      leaseExpiresAtMs: now + request.leaseMs,
      expiresAtMs: now + request.ttlMs,
    };
    return { kind: 'claimed', record };
  }
  async takeOver(key: string, _expected: string, request: ClaimRequest): Promise<ClaimResult> {
    return this.claim(key, request);
  }
  async complete(_k: string, _o: string, _r: StoredResponse, transaction?: DurableTransaction): Promise<boolean> {
    this.log.push(transaction ? 'complete-in-transaction' : 'complete');
    return this.completeAnswer;
  }
  async release(): Promise<boolean> {
    this.log.push('release');
    return true;
  }
  async extend(): Promise<boolean> {
    return true;
  }
  async get(): Promise<IdempotencyRecord | undefined> {
    return undefined;
  }
  async transaction<T>(_k: string, _o: string, work: (t: DurableTransaction) => Promise<T>): Promise<T> {
    try {
      const result = await work({ manager: 'the-manager' });
      this.log.push('commit');
      return result;
    } catch (error) {
      this.log.push('rollback');
      throw error;
    }
  }
  async deleteExpired(): Promise<number> {
    return 0;
  }
}

describe('IdempotencyService.execute on a transactional route', () => {
  const policy = resolvePolicy({}, { transactional: true });
  const created: StoredResponse = { statusCode: 201, headers: {}, body: Buffer.from('{}') };
  let durable: FencedDurableStore;
  let engine: IdempotencyService;

  beforeEach(() => {
    durable = new FencedDurableStore();
    engine = new IdempotencyService(new MemoryIdempotencyStore(), resolveModuleSettings({}), durable);
  });
  afterEach(() => engine.onApplicationShutdown());

  const claim = async () => {
    const begun = await engine.begin({
      scoped: buildScopedKey({ operation: 'op', tenant: 't', key: `k-${Math.random()}` }, ['tenant', 'operation']),
      fingerprint: 'f'.repeat(43),
      policy,
    });
    if (begun.kind !== 'claimed') throw new Error(`expected a claim, got ${begun.kind}`);
    return begun.claim;
  };
  const run = (manager: unknown[]) => ({
    run: async (m: unknown): Promise<HandlerOutcome> => {
      manager.push(m);
      return { ok: true, value: { id: 1 } };
    },
    response: async (ran: Promise<HandlerOutcome>) => {
      await ran;
      return created;
    },
    override: () => undefined,
  });

  it('runs the handler with the transaction manager and completes the record inside the transaction', async () => {
    const managers: unknown[] = [];
    const result = await engine.execute(await claim(), run(managers));
    expect(result).toEqual({ kind: 'sent' });
    expect(managers).toEqual(['the-manager']);
    expect(durable.log).toEqual(['complete-in-transaction', 'commit']);
  });

  it('a completion refused by the owner-token check rolls the transaction back and replaces the response', async () => {
    durable.completeAnswer = false;
    const result = await engine.execute(await claim(), run([]));
    expect(result).toEqual({ kind: 'replaced', reason: 'lost', retryAfterSeconds: 1 });
    expect(durable.log).toEqual(['complete-in-transaction', 'rollback']);
  });

  it('a claim lost before the transaction starts never runs the handler', async () => {
    const managers: unknown[] = [];
    durable.transaction = async () => {
      throw new IdempotencyClaimLostError('k');
    };
    const result = await engine.execute(await claim(), run(managers));
    expect(result).toEqual({ kind: 'not-run', reason: 'lost', retryAfterSeconds: 1 });
    expect(managers).toEqual([]);
  });

  it('a transaction that cannot start (database down) runs nothing, frees the key and says store-unavailable', async () => {
    const managers: unknown[] = [];
    durable.transaction = async () => {
      throw new Error('connect ECONNREFUSED');
    };
    const result = await engine.execute(await claim(), run(managers));
    expect(result).toEqual({ kind: 'not-run', reason: 'store-unavailable', retryAfterSeconds: 1 });
    expect(managers).toEqual([]);
    expect(durable.log).toContain('release');
  });

  it('a success whose outcome is forced to release rolls the business writes back and frees the key (committed ⇔ completed)', async () => {
    const result = await engine.execute(await claim(), {
      run: async () => ({ ok: true, value: 1 }),
      response: async () => created,
      override: () => 'release',
    });
    expect(result).toEqual({ kind: 'sent' });
    expect(durable.log).toEqual(['rollback', 'release']);
  });

  it('a failed commit keeps the claim (no release) and asks the client to come back after the lease', async () => {
    durable.transaction = async (_k, _o, work) => {
      await work({ manager: 'm' });
      throw new Error('connection lost during COMMIT');
    };
    const result = await engine.execute(await claim(), run([]));
    expect(result).toEqual({ kind: 'replaced', reason: 'store-unavailable', retryAfterSeconds: 30 });
    expect(durable.log).not.toContain('release');
  });
});

describe('IdempotencyService.begin in wait mode', () => {
  it('paces its re-reads when the durable row answers in-progress (no busy loop)', async () => {
    const durable = new FencedDurableStore();
    let claims = 0;
    durable.claim = async (_key, request) => {
      claims += 1;
      const now = Date.now();
      const record: IdempotencyRecord = {
        state: 'in_progress',
        fingerprint: request.fingerprint,
        ownerToken: 'someone-else',
        fencingToken: 1,
        createdAtMs: now,
        leaseExpiresAtMs: now + 60_000,
        expiresAtMs: now + 120_000,
      };
      return { kind: 'existing', record, nowMs: now };
    };
    const engine = new IdempotencyService(new MemoryIdempotencyStore(), resolveModuleSettings({}), durable);
    const begun = await engine.begin({
      scoped: buildScopedKey({ operation: 'op', key: 'k' }, ['operation']),
      fingerprint: 'f'.repeat(43),
      policy: resolvePolicy({}, { durable: true, inProgress: { mode: 'wait', maxWaitMs: 1500 } }),
    });
    expect(begun.kind).toBe('in-progress');
    expect(claims).toBeLessThanOrEqual(3); // one read, then at most one per second
  });
});
