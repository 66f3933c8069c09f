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

/** First wait before a failed completion or release is retried; it doubles up to `MAX_RETRY_DELAY_MS`. */
const FIRST_RETRY_DELAY_MS = 50;
const MAX_RETRY_DELAY_MS = 2000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

/**
 * The wait before retry `attempt + 1` of a failed completion or release, or undefined when the
 * lease may lapse before it is over (or was lost): then another request may own the key.
 */
function retryDelayMs(claim: IdempotencyClaim, attempt: number): number | undefined {
  const delayMs = Math.min(MAX_RETRY_DELAY_MS, FIRST_RETRY_DELAY_MS * 2 ** attempt);
  // One heartbeat of slack: the retry must land while the lease is still held.
  return Date.now() + delayMs + claim.policy.heartbeatMs < claim.leaseHeldUntilMs ? delayMs : undefined;
}

export class ClaimSettlement {
  constructor(
    private readonly store: IdempotencyStore,
    private readonly durable: () => DurableIdempotencyStore,
    private readonly telemetry: IdempotencyTelemetry,
    private readonly claims: LiveClaims,
    private readonly sealer: StoredResponseSealer,
  ) {}

  /** `IdempotencyService.finish()`: stores the response or releases the key, as the outcome policy decides. */
  async finish(
    claim: IdempotencyClaim,
    response: StoredResponse,
    override?: OutcomeOverride,
    /** False when `settle()` retries it: the heartbeat then runs until the claim is settled. */
    dropFirst = true,
  ): Promise<FinishResult> {
    if (dropFirst) this.claims.drop(claim);
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
  async abandon(claim: IdempotencyClaim, dropFirst = true): Promise<FinishResult> {
    if (dropFirst) this.claims.drop(claim);
    await claim.takeTransaction()?.rollback();
    return this.release(claim);
  }

  /**
   * Finishes (or abandons, without a response) a claim whose handler already ran. A store failure
   * is retried with backoff while the lease is held (the heartbeat keeps renewing it meanwhile),
   * so one timeout does not let a retry run the handler again (docs/contract.md B.7 rule 17a);
   * past the lease, the claim is given up, logged and counted, and recovery takes over. Never throws.
   */
  async settle(
    claim: IdempotencyClaim,
    response: StoredResponse | undefined,
    override: OutcomeOverride | undefined,
  ): Promise<FinishResult | undefined> {
    const action =
      response && decideOutcome(response.statusCode, claim.policy, override) === 'store' ? 'complete' : 'release';
    // A claim whose row lives in an open transaction ends with that transaction: nothing to retry.
    const retriable = !claim.durableInTransaction;
    try {
      const end = () => (response ? this.finish(claim, response, override, false) : this.abandon(claim, false));
      return await (retriable ? this.whileLeaseHeld(claim, 'finish', end) : end());
    } catch (error) {
      this.telemetry.finishGivenUp(claim, action, error);
      return undefined;
    } finally {
      this.claims.drop(claim);
    }
  }

  /**
   * Runs `call`, retrying it with backoff on failure for as long as the claim's lease is held
   * (docs/contract.md B.7 rule 17a): a transient store error must not let the lease lapse and a
   * retry run the handler again. Rejects with the last error once the lease may lapse.
   */
  private async whileLeaseHeld<T>(claim: IdempotencyClaim, phase: string, call: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await call();
      } catch (error) {
        const delayMs = retryDelayMs(claim, attempt);
        if (delayMs === undefined) throw error;
        this.telemetry.storeError(claim.scoped, { phase, outcome: 'retried_while_lease_held', error });
        await sleep(delayMs);
      }
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
      await this.whileLeaseHeld(claim, 'mirror_completion', async () => {
        if (await this.store.complete(scoped.id, ownerToken, stored)) return;
        await this.store.restore(scoped.id, { ...record, state: 'completed', ownerToken, response: stored });
      });
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

  /** Frees the fast tier after the durable tier decided: retried while the lease is held, never thrown. */
  private async releaseFastFollower(claim: IdempotencyClaim): Promise<void> {
    const { scoped, ownerToken } = claim;
    await this.whileLeaseHeld(claim, 'release_fast', () => this.store.release(scoped.id, ownerToken)).catch(
      (error: unknown) =>
        this.telemetry.storeError(scoped, { phase: 'release_fast', outcome: 'fast_lease_lapses', error }),
    );
  }

  private async freeKey(claim: IdempotencyClaim): Promise<FinishResult> {
    const { scoped, ownerToken, policy } = claim;
    if (claim.durableInTransaction) {
      // The row was claimed inside the route's transaction and never committed: once that rolled
      // back, the authority holds nothing, and the fast tier follows, retried so that its live lease
      // does not answer 409 until it lapses; a failure past the lease changes nothing.
      await this.releaseFastFollower(claim);
      return 'released';
    }
    if (policy.durable) {
      const released = await this.durable().release(scoped.id, ownerToken);
      await this.releaseFastFollower(claim);
      if (!released) this.telemetry.lostLease(claim, 'release');
      return released ? 'released' : 'lost';
    }
    const released = await this.store.release(scoped.id, ownerToken);
    if (!released) this.telemetry.lostLease(claim, 'release');
    return released ? 'released' : 'lost';
  }
}
