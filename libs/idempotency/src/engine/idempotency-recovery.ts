/**
 * What `begin` answers when the key already has a record, or when a durable route must confirm
 * its fast claim: replay, mismatch or in progress, and recovery of dead leases, with the durable
 * row as the authority on durable routes (DESIGN steps 4 and 7).
 */
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type { ResolvedPolicy } from '../idempotency.options.js';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type {
  DurableIdempotencyStore,
  DurableTransactionOptions,
  TransactionalClaimResult,
} from '../stores/durable-idempotency-store.js';
import type { ClaimRequest, ClaimResult, IdempotencyStore } from '../stores/idempotency-store.js';
import type { IdempotencyTelemetry } from '../telemetry/idempotency-telemetry.js';
import type { BeginRequest, BeginResult } from './idempotency-engine.types.js';
import type { LiveClaims } from './live-claims.js';
import type { StoredResponseSealer } from './stored-response-sealer.js';

export class IdempotencyRecovery {
  constructor(
    private readonly store: IdempotencyStore,
    private readonly durable: () => DurableIdempotencyStore,
    private readonly telemetry: IdempotencyTelemetry,
    private readonly claims: LiveClaims,
    private readonly sealer: StoredResponseSealer,
    /** The stored answer of a run whose outcome is unknown (`staleLock: 'fail'`), built by the HTTP side. */
    private readonly outcomeUnknownResponse: () => StoredResponse,
  ) {
    // `claimInTransaction` measured and traced as the durable claim it is (phase `claim`), through
    // the telemetry's public store wrapper.
    this.observedClaim = telemetry.instrumentStore(
      {
        claim: (
          durable: DurableIdempotencyStore,
          key: string,
          request: ClaimRequest,
          options: DurableTransactionOptions,
        ) => durable.claimInTransaction!(key, request, options),
      },
      'durable',
    );
  }

  private readonly observedClaim: {
    claim(
      durable: DurableIdempotencyStore,
      key: string,
      request: ClaimRequest,
      options: DurableTransactionOptions,
    ): Promise<TransactionalClaimResult>;
  };

  async judge(
    request: BeginRequest,
    record: IdempotencyRecord,
    nowMs: number,
    claimRequest: ClaimRequest,
    afterTakeover = false,
  ): Promise<BeginResult> {
    // A mismatch beats in-progress: waiting would not help the client (docs/contract.md B.5 step 5.3).
    if (record.fingerprint !== request.fingerprint) return { kind: 'mismatch' };
    if (record.state === 'completed') return this.replayOf(request.scoped.id, record);
    if (record.leaseExpiresAtMs > nowMs || afterTakeover) {
      const committed =
        request.policy.durable && !afterTakeover ? await this.committedAnswer(request, record) : undefined;
      return committed ?? { kind: 'in-progress', retryAfterSeconds: retryAfter(request.policy, record, nowMs) };
    }
    return request.policy.durable
      ? this.recoverThroughDurable(request, record, claimRequest)
      : this.recoverDeadLease(request, record, claimRequest);
  }

  /**
   * We hold the fast claim of a durable route: insert the durable row. If one exists, the fast
   * tier had lost the record (eviction, failover, flush) or its owner died: the row decides.
   * Redis alone never decides that a durable route runs (DESIGN step 4).
   */
  async confirmDurable(
    request: BeginRequest,
    claimRequest: ClaimRequest,
    /** The fast record this request took over from a dead lease, if it did. */
    fastTakeover?: IdempotencyRecord,
  ): Promise<BeginResult> {
    const { scoped, policy } = request;
    const durable = this.durable();
    try {
      let claimed: Extract<ClaimResult, { kind: 'existing' }>;
      if (policy.transactional && durable.claimInTransaction) {
        // The claim is the first statement of the route's transaction (docs/durable-tier.md):
        // a duplicate waits on its uncommitted row, the handler runs in it, one commit.
        const opened = await this.observedClaim.claim(durable, scoped.id, claimRequest, {
          isolationLevel: policy.isolationLevel,
          label: this.telemetry.operationOf(scoped),
          // Both paths that end this transaction (executeInClaimTransaction, completeInTransaction)
          // commit right after a completion that answered true.
          commitOnComplete: true,
        });
        if (opened.kind === 'claimed') {
          const { transaction } = opened;
          // After a dead fast lease, the earlier run may have been cut short (its transaction, and
          // its durable claim, went with its process): this run is a takeover, and its fencing
          // token stays above the dead run's.
          const record =
            fastTakeover && fastTakeover.fencingToken > transaction.record.fencingToken
              ? { ...transaction.record, fencingToken: fastTakeover.fencingToken }
              : transaction.record;
          return this.claims.hold(scoped, record, policy, fastTakeover !== undefined, transaction);
        }
        if (opened.kind === 'busy') {
          // Another request's transaction holds the key's uncommitted claim past the lock timeout.
          await this.store.release(scoped.id, claimRequest.ownerToken).catch(() => undefined);
          return { kind: 'in-progress', retryAfterSeconds: policy.inProgress.retryAfterSeconds ?? 1 };
        }
        claimed = opened;
      } else {
        const inserted = await durable.claim(scoped.id, claimRequest);
        if (inserted.kind === 'claimed') return this.claims.hold(scoped, inserted.record, policy, false);
        claimed = inserted;
      }
      const row = claimed.record;
      if (
        row.fingerprint !== request.fingerprint ||
        row.state === 'completed' ||
        row.leaseExpiresAtMs > claimed.nowMs
      ) {
        return await this.answerFromDurable(request, row, claimed.nowMs, claimRequest.ownerToken);
      }
      return await this.recoverDurableRow(request, row, claimRequest);
    } catch (error) {
      await this.store.release(scoped.id, claimRequest.ownerToken).catch(() => undefined);
      throw error;
    }
  }

  /**
   * On a durable route the fast tier may say "in progress" of a request whose durable row has
   * completed: its owner committed, then could not mirror the completion (Redis cut after the
   * commit), and the fast lease would keep retries at 409 until it lapses. The durable row is
   * the authority: it answers, and completes the fast record when it is the same claim's. A
   * durable store that cannot be read leaves the in-progress answer, which is still true.
   */
  private async committedAnswer(request: BeginRequest, record: IdempotencyRecord): Promise<BeginResult | undefined> {
    const id = request.scoped.id;
    let row: IdempotencyRecord | undefined;
    try {
      row = await this.durable().get(id);
    } catch (error) {
      this.telemetry.storeError(request.scoped, { phase: 'claim', outcome: 'answered_in_progress', error });
      return undefined;
    }
    if (!row || row.state !== 'completed' || !row.response || row.fingerprint !== request.fingerprint) return undefined;
    if (row.ownerToken === record.ownerToken)
      await this.store.complete(id, record.ownerToken, row.response).catch(() => undefined);
    return this.replayOf(id, row);
  }

  private replayOf(id: string, record: IdempotencyRecord): BeginResult {
    if (!record.response) throw new IdempotencyStoreError('A completed record has no response: inspect or delete it.');
    const response = this.sealer.open(id, record.response);
    return response.bodyOmitted ? { kind: 'replay-unavailable', response } : { kind: 'replay', response };
  }

  /**
   * The owner of the record stopped renewing its lease: it died or froze. Take the record over
   * (compare-and-set on the dead owner's token), so a zombie that wakes up is fenced out.
   */
  private async recoverDeadLease(
    request: BeginRequest,
    record: IdempotencyRecord,
    claimRequest: ClaimRequest,
  ): Promise<BeginResult> {
    const { scoped, policy } = request;
    const taken = await this.store.takeOver(scoped.id, record.ownerToken, claimRequest);
    if (taken.kind === 'existing') {
      return this.judge(request, taken.record, taken.nowMs, claimRequest, true);
    }
    if (policy.staleLock === 'takeover') {
      return this.claims.hold(scoped, taken.record, policy, true);
    }
    const response = this.outcomeUnknownResponse();
    const completed = await this.store
      .complete(scoped.id, taken.record.ownerToken, this.sealer.seal(scoped.id, response))
      .catch(async (error: unknown) => {
        await this.store.release(scoped.id, taken.record.ownerToken).catch(() => undefined);
        throw error;
      });
    if (!completed) return { kind: 'in-progress', retryAfterSeconds: 1 };
    return { kind: 'outcome-unknown', response };
  }

  /**
   * A durable route found a dead lease in the fast tier. Take the fast record first, so one
   * recoverer proceeds, then let the durable row decide (DESIGN step 7).
   */
  private async recoverThroughDurable(
    request: BeginRequest,
    record: IdempotencyRecord,
    claimRequest: ClaimRequest,
  ): Promise<BeginResult> {
    const taken = await this.store.takeOver(request.scoped.id, record.ownerToken, claimRequest);
    if (taken.kind === 'existing') {
      return this.judge(request, taken.record, taken.nowMs, claimRequest, true);
    }
    return this.confirmDurable(request, claimRequest, taken.record);
  }

  /** The durable row answers (mismatch, replay, in progress); the fast tier is repaired or freed. */
  private async answerFromDurable(
    request: BeginRequest,
    row: IdempotencyRecord,
    nowMs: number,
    fastOwnerToken: string,
  ): Promise<BeginResult> {
    const id = request.scoped.id;
    if (row.fingerprint === request.fingerprint && row.state === 'completed' && row.response) {
      // Repair: the fast claim we hold becomes the completed record, so the next retry is cheap.
      await this.store.complete(id, fastOwnerToken, row.response).catch(() => undefined);
      return this.replayOf(id, row);
    }
    await this.store.release(id, fastOwnerToken).catch(() => undefined);
    if (row.fingerprint !== request.fingerprint) return { kind: 'mismatch' };
    return { kind: 'in-progress', retryAfterSeconds: retryAfter(request.policy, row, nowMs) };
  }

  /**
   * The durable row is in progress under a dead lease. On a transactional route nothing of the
   * dead run committed (its business writes and the completed row commit together), so taking
   * over is safe. Otherwise the `staleLock` policy decides.
   */
  private async recoverDurableRow(
    request: BeginRequest,
    row: IdempotencyRecord,
    claimRequest: ClaimRequest,
  ): Promise<BeginResult> {
    const { scoped, policy } = request;
    const durable = this.durable();
    const taken = await durable.takeOver(scoped.id, row.ownerToken, claimRequest);
    if (taken.kind === 'existing') {
      return this.answerFromDurable(request, taken.record, taken.nowMs, claimRequest.ownerToken);
    }
    if (policy.transactional || policy.staleLock === 'takeover') {
      return this.claims.hold(scoped, taken.record, policy, true);
    }
    const response = this.outcomeUnknownResponse();
    const sealed = this.sealer.seal(scoped.id, response);
    const completed = await durable
      .complete(scoped.id, claimRequest.ownerToken, sealed)
      .catch(async (error: unknown) => {
        await durable.release(scoped.id, claimRequest.ownerToken).catch(() => undefined);
        throw error; // the caller (confirmDurable) frees the fast claim
      });
    if (!completed) {
      await this.store.release(scoped.id, claimRequest.ownerToken).catch(() => undefined);
      return { kind: 'in-progress', retryAfterSeconds: 1 };
    }
    await this.store.complete(scoped.id, claimRequest.ownerToken, sealed).catch(() => undefined);
    return { kind: 'outcome-unknown', response };
  }
}

function retryAfter(policy: ResolvedPolicy, record: IdempotencyRecord, nowMs: number): number {
  const { retryAfterSeconds, maxRetryAfterSeconds } = policy.inProgress;
  if (retryAfterSeconds !== undefined) return retryAfterSeconds;
  const remaining = Math.ceil((record.leaseExpiresAtMs - nowMs) / 1000);
  return Math.min(Math.max(remaining, 1), maxRetryAfterSeconds);
}
