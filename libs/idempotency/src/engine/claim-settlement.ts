/**
 * How a claim ends: its response stored (completed) or its key released, fenced by the claim's
 * owner token, the durable tier first on durable routes and the fast tier following.
 */
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type { DurableClaimTransaction, DurableIdempotencyStore } from '../stores/durable-idempotency-store.js';
import type { IdempotencyStore } from '../stores/idempotency-store.js';
import type { IdempotencyTelemetry } from '../telemetry/idempotency-telemetry.js';
import type { IdempotencyClaim } from './idempotency-claim.js';
import type { FinishResult } from './idempotency-engine.types.js';
import type { LiveClaims } from './live-claims.js';
import { decideOutcome, type OutcomeOverride } from './outcome-policy.js';
import type { StoredResponseSealer } from './stored-response-sealer.js';

export class ClaimSettlement {
  constructor(
    private readonly store: IdempotencyStore,
    private readonly durable: () => DurableIdempotencyStore,
    private readonly telemetry: IdempotencyTelemetry,
    private readonly claims: LiveClaims,
    private readonly sealer: StoredResponseSealer,
  ) {}

  /** `IdempotencyService.finish()`: stores the response or releases the key, as the outcome policy decides. */
  async finish(claim: IdempotencyClaim, response: StoredResponse, override?: OutcomeOverride): Promise<FinishResult> {
    this.claims.drop(claim);
    const transaction = claim.takeTransaction();
    if (decideOutcome(response.statusCode, claim.policy, override) === 'release') {
      await transaction?.rollback();
      return this.release(claim);
    }
    const stored = this.sealer.storable(claim.scoped.id, claim.policy, response);
    if (transaction) {
      // The handler ran outside the claim's transaction (the adapter never called execute): the
      // row completes in that transaction, with no business writes, and commits.
      return this.telemetry.observeFinish('complete', claim, () =>
        this.completeInTransaction(claim, transaction, stored),
      );
    }
    return this.telemetry.observeFinish('complete', claim, () => this.completeClaim(claim, stored));
  }

  /** `IdempotencyService.abandon()`: frees the key without a response (an open claim transaction rolls back). */
  async abandon(claim: IdempotencyClaim): Promise<FinishResult> {
    this.claims.drop(claim);
    await claim.takeTransaction()?.rollback();
    return this.release(claim);
  }

  /**
   * Finishes (or abandons, without a response) a claim whose handler already ran: a store
   * failure now is logged, never thrown, and the lease lapses so that recovery takes over.
   */
  async settle(
    claim: IdempotencyClaim,
    response: StoredResponse | undefined,
    override: OutcomeOverride | undefined,
  ): Promise<FinishResult | undefined> {
    try {
      return response ? await this.finish(claim, response, override) : await this.abandon(claim);
    } catch (error) {
      this.claims.drop(claim);
      this.telemetry.storeError(claim.scoped, { phase: 'finish', outcome: 'lease_lapses_then_recovery', error });
      return undefined;
    }
  }

  release(claim: IdempotencyClaim): Promise<FinishResult> {
    return this.telemetry.observeFinish('release', claim, () => this.freeKey(claim));
  }

  /** After the durable row completed: the fast tier follows, and its failure changes nothing. */
  async mirrorCompletion(claim: IdempotencyClaim, stored: StoredResponse): Promise<void> {
    const { scoped, ownerToken, record } = claim;
    this.telemetry.recordStored(claim, stored);
    try {
      if (await this.store.complete(scoped.id, ownerToken, stored)) return;
      await this.store.restore(scoped.id, { ...record, state: 'completed', ownerToken, response: stored });
    } catch (error) {
      this.telemetry.storeError(scoped, { phase: 'mirror_completion', outcome: 'durable_record_answers', error });
    }
  }

  private async completeClaim(claim: IdempotencyClaim, stored: StoredResponse): Promise<FinishResult> {
    if (claim.policy.durable) {
      const completed = await this.durable().complete(claim.scoped.id, claim.ownerToken, stored);
      if (!completed) {
        this.telemetry.lostLease(claim, 'complete');
        return 'lost';
      }
      await this.mirrorCompletion(claim, stored);
      return 'stored';
    }
    const completed = await this.store.complete(claim.scoped.id, claim.ownerToken, stored);
    if (!completed) this.telemetry.lostLease(claim, 'complete');
    else this.telemetry.recordStored(claim, stored);
    return completed ? 'stored' : 'lost';
  }

  /** Completes the row in the claim's open transaction and commits it; the fast tier follows. */
  private async completeInTransaction(
    claim: IdempotencyClaim,
    transaction: DurableClaimTransaction,
    stored: StoredResponse,
  ): Promise<FinishResult> {
    try {
      if (!(await transaction.complete(stored))) {
        await transaction.rollback();
        this.telemetry.lostLease(claim, 'complete');
        await this.store.release(claim.scoped.id, claim.ownerToken).catch(() => undefined);
        return 'lost';
      }
      await transaction.commit();
    } finally {
      await transaction.rollback();
    }
    await this.mirrorCompletion(claim, stored);
    return 'stored';
  }

  private async freeKey(claim: IdempotencyClaim): Promise<FinishResult> {
    const { scoped, ownerToken, policy } = claim;
    if (claim.durableInTransaction) {
      // The row was claimed inside the route's transaction and never committed: once that rolled
      // back, the authority holds nothing, and the fast tier follows (a failure there changes nothing).
      await this.store.release(scoped.id, ownerToken).catch(() => undefined);
      return 'released';
    }
    if (policy.durable) {
      const released = await this.durable().release(scoped.id, ownerToken);
      await this.store.release(scoped.id, ownerToken).catch(() => undefined);
      if (!released) this.telemetry.lostLease(claim, 'release');
      return released ? 'released' : 'lost';
    }
    const released = await this.store.release(scoped.id, ownerToken);
    if (!released) this.telemetry.lostLease(claim, 'release');
    return released ? 'released' : 'lost';
  }
}
