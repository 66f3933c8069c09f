/**
 * How a claim ends: its response stored (completed) or its key released, fenced by the claim's
 * owner token, the durable tier first on durable routes and the fast tier following.
 */
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type { DurableIdempotencyStore } from '../stores/durable-idempotency-store.js';
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
    if (decideOutcome(response.statusCode, claim.policy, override) === 'release') {
      return this.release(claim);
    }
    return this.telemetry.observeFinish('complete', claim, () =>
      this.completeClaim(claim, this.sealer.storable(claim.scoped.id, claim.policy, response)),
    );
  }

  /** `IdempotencyService.abandon()`: frees the key without a response. */
  async abandon(claim: IdempotencyClaim): Promise<FinishResult> {
    this.claims.drop(claim);
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

  private async freeKey(claim: IdempotencyClaim): Promise<FinishResult> {
    const { scoped, ownerToken, policy } = claim;
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
