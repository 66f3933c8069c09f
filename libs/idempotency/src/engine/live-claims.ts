/**
 * The claims this process holds right now: each one's heartbeat is started when it is granted
 * and stopped when it ends, or when the application shuts down.
 */
import type { ResolvedPolicy } from '../idempotency.options.js';
import type { IdempotencyRecord } from '../interfaces/idempotency-record.interface.js';
import type { DurableClaimTransaction, DurableIdempotencyStore } from '../stores/durable-idempotency-store.js';
import type { IdempotencyStore } from '../stores/idempotency-store.js';
import type { IdempotencyTelemetry } from '../telemetry/idempotency-telemetry.js';
import { IdempotencyClaim, type LeaseRenewal } from './idempotency-claim.js';
import type { BeginResult } from './idempotency-engine.types.js';
import type { ScopedKey } from './scoped-key.js';

export class LiveClaims {
  /** Each live claim, with when this process was granted it (insertion order: oldest first). */
  private readonly liveClaims = new Map<IdempotencyClaim, number>();
  private readonly unwatch: () => void;

  constructor(
    private readonly store: IdempotencyStore,
    private readonly durable: () => DurableIdempotencyStore,
    private readonly telemetry: IdempotencyTelemetry,
  ) {
    this.unwatch = telemetry.watchHeldClaims(() => ({
      count: this.liveClaims.size,
      oldestSinceMs: this.liveClaims.values().next().value,
    }));
  }

  hold(
    scoped: ScopedKey,
    record: IdempotencyRecord,
    policy: ResolvedPolicy,
    tookOver: boolean,
    transaction?: DurableClaimTransaction,
  ): BeginResult {
    const claim = new IdempotencyClaim(scoped, record, policy, tookOver, transaction);
    claim.startHeartbeat(this.leaseRenewals(claim), () => this.telemetry.lostLease(claim, 'heartbeat'));
    this.liveClaims.set(claim, Date.now());
    return { kind: 'claimed', claim };
  }

  drop(claim: IdempotencyClaim): void {
    claim.stopHeartbeat();
    this.liveClaims.delete(claim);
  }

  /**
   * Stops every heartbeat: the application shuts down, the leases lapse on their own. A claim
   * transaction nobody took over (begin() without execute, finish or abandon) is rolled back, so
   * its connection goes back to the pool.
   */
  dropAll(): void {
    for (const claim of this.liveClaims.keys()) {
      claim.stopHeartbeat();
      void claim
        .takeTransaction()
        ?.rollback()
        .catch(() => undefined);
    }
    this.liveClaims.clear();
    this.unwatch();
  }

  /**
   * What the heartbeat renews: each tier on its own beat (`IdempotencyClaim.startHeartbeat`). On
   * durable routes the durable lease is the one that counts: its refusal loses the claim. A fast
   * refusal there (the record flushed, evicted, or taken after its lease lapsed) only ends the
   * fast renewals: the durable row, live and ours, still turns every other claimant away.
   */
  private leaseRenewals(claim: IdempotencyClaim): LeaseRenewal[] {
    const { scoped, ownerToken, policy } = claim;
    const fast: LeaseRenewal = {
      tier: 'fast',
      decisive: !policy.durable,
      renew: () => this.store.extend(scoped.id, ownerToken, policy.leaseMs),
    };
    // A durable row claimed inside the route's transaction has no committed row to renew: its
    // lease is the open transaction itself (a duplicate's insert waits on it), which ends with
    // the process. The fast tier is still renewed, not decisive, as on every durable route.
    if (!policy.durable || claim.durableInTransaction) return [fast];
    return [
      fast,
      { tier: 'durable', decisive: true, renew: () => this.durable().extend(scoped.id, ownerToken, policy.leaseMs) },
    ];
  }
}
