import type { OutcomeOverride } from './outcome-policy.js';
import type { IdempotencyClaim } from './idempotency-claim.js';
import { derivedKey } from './scoped-key.js';

/**
 * What a handler may know about the claim it runs under (DESIGN "Beyond HTTP"). Obtain it with
 * `@IdempotencyContext()` in the handler, or `IdempotencyContextAccessor.get()` in the services it
 * calls; it is undefined when the request carries no key on an optional route.
 *
 * @publicApi
 */
export class IdempotencyContextRef {
  private forcedOutcome?: OutcomeOverride;
  private transactionManager?: unknown;

  constructor(private readonly claim: IdempotencyClaim) {}

  /** Hash of the scoped key: safe to log, never the raw client key. */
  get keyHash(): string {
    return this.claim.scoped.id;
  }
  /** Token of this claim; a takeover issues a new one. */
  get ownerToken(): string {
    return this.claim.ownerToken;
  }
  /** 1 for the first claim of the record, +1 for each takeover: pass it to systems that fence writes. */
  get fencingToken(): number {
    return this.claim.fencingToken;
  }
  /** True when this run took over a dead lease, i.e. an earlier run may have been interrupted. */
  get tookOver(): boolean {
    return this.claim.tookOver;
  }
  /** True once the claim was lost (a renewal was refused): its result will not be stored. */
  get lost(): boolean {
    return this.claim.lost;
  }

  /**
   * A key for a downstream system (a payment provider, another idempotent API), stable across
   * retries of the same request and distinct per `name`, so the downstream call deduplicates
   * even when this handler runs again after a crash (docs/contract.md B.7 rule 17).
   */
  derivedKey(name: string): string {
    return derivedKey(this.claim.scoped, name);
  }

  /**
   * On a `transactional` route, the ORM handle of the transaction the engine opened around the
   * handler (a TypeORM `EntityManager` with `nestjs-idempotency/typeorm`). Write the business rows
   * through it: they commit together with the completed idempotency record, or not at all.
   *
   * @example const manager = idem.getManager<EntityManager>(); await manager.save(order);
   * @throws Error when the route is not transactional.
   */
  getManager<T = unknown>(): T {
    if (this.transactionManager === undefined) {
      throw new Error(
        'No idempotency transaction: mark the route @Idempotent({ transactional: true }) and configure a durableStore.',
      );
    }
    return this.transactionManager as T;
  }

  /** True on a transactional route, once the handler runs in the engine's transaction. */
  get inTransaction(): boolean {
    return this.transactionManager !== undefined;
  }

  /** @internal */
  attachManager(manager: unknown): void {
    this.transactionManager = manager ?? undefined;
  }

  /** Forces what becomes of this response: `store` or `release` (docs/contract.md B.7 rule 19). */
  setOutcome(outcome: OutcomeOverride): void {
    this.forcedOutcome = outcome;
  }

  /** @internal */
  get outcome(): OutcomeOverride | undefined {
    return this.forcedOutcome;
  }
}
