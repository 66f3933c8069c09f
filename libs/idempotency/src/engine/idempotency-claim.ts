/**
 * A claim this process holds on a record, and the heartbeat that keeps its lease alive in each
 * tier until the claim ends or a decisive tier refuses a renewal.
 */
import type { ResolvedPolicy } from '../idempotency.options.js';
import type { IdempotencyRecord } from '../interfaces/idempotency-record.interface.js';
import type { DurableClaimTransaction } from '../stores/durable-idempotency-store.js';
import type { ScopedKey } from './scoped-key.js';

/**
 * One tier's lease renewal, as the heartbeat runs it.
 *
 * @internal
 */
export interface LeaseRenewal {
  /** Which tier it renews. */
  readonly tier: 'fast' | 'durable';
  /** Renews the lease: true when renewed, false when refused (the record is not this claim's any more). */
  renew(): Promise<boolean>;
  /** A refusal by this tier loses the claim; a refusal by a tier that is not decisive only ends its own renewals. */
  readonly decisive: boolean;
}

/**
 * Renewals of one tier that may be unanswered at once: a renewal that did not answer by the next
 * beat is retried on a fresh call (another pooled connection may answer), but a hung server does
 * not collect one call per beat.
 */
const MAX_PENDING_RENEWALS = 2;

/**
 * A claim this process holds on a record. While it lives, a heartbeat renews the lease in each
 * tier; once the authoritative store refuses a renewal, the claim is `lost` and the engine will
 * not complete it.
 */
export class IdempotencyClaim {
  /** The pending beat of each tier. */
  private readonly beats = new Set<NodeJS.Timeout>();
  private beating = false;
  private lostClaim = false;
  private openTransaction?: DurableClaimTransaction;
  /** When the decisive tier last confirmed the lease (sent time of the renewal it granted). */
  private leaseConfirmedAtMs = Date.now();

  constructor(
    readonly scoped: ScopedKey,
    readonly record: IdempotencyRecord,
    readonly policy: ResolvedPolicy,
    /** True when this claim took over a dead lease (the handler runs again). */
    readonly tookOver: boolean,
    /**
     * The open transaction whose first statement inserted this claim's durable row
     * (`DurableIdempotencyStore.claimInTransaction`, transactional routes). @internal
     */
    transaction?: DurableClaimTransaction,
  ) {
    this.openTransaction = transaction;
    this.durableInTransaction = transaction !== undefined;
  }

  /**
   * True when the durable row of this claim lives only in an open transaction (it is never
   * committed `in_progress`): releasing the claim frees the fast tier only, and the durable tier
   * is never renewed. @internal
   */
  readonly durableInTransaction: boolean;

  /**
   * Hands the open transaction over to whoever ends it (execute, finish, abandon), once: later
   * calls get undefined. @internal
   */
  takeTransaction(): DurableClaimTransaction | undefined {
    const transaction = this.openTransaction;
    this.openTransaction = undefined;
    return transaction;
  }

  get ownerToken(): string {
    return this.record.ownerToken;
  }
  get fencingToken(): number {
    return this.record.fencingToken;
  }
  /** True once a renewal was refused: another claim may own the record now. */
  get lost(): boolean {
    return this.lostClaim;
  }

  /**
   * Until when the lease is known to be held: the last renewal the decisive tier granted (or the
   * claim itself), plus the lease. Past it, another request may have taken the key over. @internal
   */
  get leaseHeldUntilMs(): number {
    return this.lostClaim ? 0 : this.leaseConfirmedAtMs + this.policy.leaseMs;
  }

  /**
   * Starts one heartbeat per tier, each on its own timer, so a hung database cannot starve the
   * Redis renewal, nor the reverse.
   * @internal
   */
  startHeartbeat(renewals: readonly LeaseRenewal[], onLost: () => void): void {
    this.beating = true;
    for (const renewal of renewals) this.beatOn(renewal, onLost);
  }

  /** @internal */
  stopHeartbeat(): void {
    this.beating = false;
    for (const beat of this.beats) clearTimeout(beat);
    this.beats.clear();
  }

  /**
   * A renewal every `heartbeatMs`. A renewal is timed out when the next beat comes before its
   * answer: that beat failed (the lease keeps a beat of slack, `heartbeatMs ≤ leaseMs / 2`) and
   * a fresh renewal is sent, unless `MAX_PENDING_RENEWALS` are unanswered. An answer still
   * counts when it comes late: a refusal by the decisive tier loses the claim, a refusal by the
   * other one ends that tier's renewals. Failed calls are retried at the next beat.
   */
  private beatOn(renewal: LeaseRenewal, onLost: () => void): void {
    let pending = 0;
    let refused = false;
    const onRefusal = () => {
      if (!this.beating || refused) return; // finished meanwhile: a refusal now means nothing
      refused = true;
      if (!renewal.decisive) return;
      this.lostClaim = true;
      this.stopHeartbeat();
      onLost();
    };
    const schedule = () => {
      const beat = setTimeout(() => {
        this.beats.delete(beat);
        if (!this.beating || refused) return;
        if (pending < MAX_PENDING_RENEWALS) {
          pending += 1;
          const sentAtMs = Date.now();
          new Promise<boolean>((resolve) => resolve(renewal.renew())).then(
            (renewed) => {
              pending -= 1;
              if (!renewed) onRefusal();
              else if (renewal.decisive) this.leaseConfirmedAtMs = Math.max(this.leaseConfirmedAtMs, sentAtMs);
            },
            () => {
              pending -= 1;
            },
          );
        }
        schedule();
      }, this.policy.heartbeatMs);
      beat.unref();
      this.beats.add(beat);
    };
    schedule();
  }
}
