/**
 * `execute` on `transactional` routes: the handler runs inside a durable-store transaction, and
 * the completed record commits in it, or nothing does (docs/contract.md B.7 rule 17a).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { context as otelContext } from '@opentelemetry/api';
import { IdempotencyClaimLostError } from '../errors/idempotency-claim-lost.error.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type { DurableClaimTransaction, DurableIdempotencyStore } from '../stores/durable-idempotency-store.js';
import type { IdempotencyTelemetry } from '../telemetry/idempotency-telemetry.js';
import type { ClaimSettlement } from './claim-settlement.js';
import type { IdempotencyClaim } from './idempotency-claim.js';
import type { Execution, ExecutionResult, HandlerOutcome } from './idempotency-engine.types.js';
import type { LiveClaims } from './live-claims.js';
import { decideOutcome } from './outcome-policy.js';
import type { StoredResponseSealer } from './stored-response-sealer.js';

/** Thrown inside a transaction to roll it back on purpose; never escapes the engine. */
const ROLLBACK = Symbol('rollback');

export class IdempotencyTransaction {
  /** The operation whose transactional handler runs in this async context, if one does. */
  private readonly running = new AsyncLocalStorage<string>();

  constructor(
    private readonly durable: () => DurableIdempotencyStore,
    private readonly telemetry: IdempotencyTelemetry,
    private readonly claims: LiveClaims,
    private readonly settlement: ClaimSettlement,
    private readonly sealer: StoredResponseSealer,
  ) {
    // The claim's transaction observed as the store's `transaction()` is (a span around the
    // handler; a failed COMMIT counted as a store error, the work's own failures not), through
    // the telemetry's public store wrapper: the work runs, then the COMMIT.
    this.observed = telemetry.instrumentStore(
      {
        async transaction(_key: string, transaction: DurableClaimTransaction, work: () => Promise<void>) {
          await work();
          await transaction.commit();
        },
        complete: (transaction: DurableClaimTransaction, response: StoredResponse) => transaction.complete(response),
      },
      'durable',
    );
  }

  private readonly observed: {
    transaction(key: string, transaction: DurableClaimTransaction, work: () => Promise<void>): Promise<void>;
    complete(transaction: DurableClaimTransaction, response: StoredResponse): Promise<boolean>;
  };

  /**
   * The operation of the transactional handler (route or `run()`) running in the caller's async
   * context: a transactional claim made there would not share its fate, and is refused.
   */
  activeOperation(): string | undefined {
    return this.running.getStore();
  }

  async execute(claim: IdempotencyClaim, execution: Execution): Promise<ExecutionResult> {
    const open = claim.takeTransaction();
    if (open) return this.executeInClaimTransaction(claim, open, execution);
    if (claim.durableInTransaction) {
      // Its transaction was already ended (finish, abandon, or an execute before this one).
      this.claims.drop(claim);
      return { kind: 'not-run', reason: 'lost', retryAfterSeconds: 1 };
    }
    const { scoped, ownerToken, policy } = claim;
    let outcome: HandlerOutcome | undefined;
    let response: StoredResponse | undefined;
    let committed: StoredResponse | undefined;
    try {
      const transactionOptions = { isolationLevel: policy.isolationLevel, label: this.telemetry.operationOf(scoped) };
      await this.durable().transaction(
        scoped.id,
        ownerToken,
        async (transaction) => {
          const undoHandlerWrites = await transaction.savepoint?.();
          const ran = this.running
            .run(this.telemetry.operationOf(scoped), () => execution.run(transaction.manager))
            .then((value) => (outcome = value));
          response = await execution.response(ran);
          await ran;
          // Committed ⇔ completed (docs/contract.md B.7 rule 17a): whatever frees the key, a failure or a
          // success the policy does not keep, rolls the handler's writes back with it.
          if (!response) throw ROLLBACK;
          if (decideOutcome(response.statusCode, policy, execution.override(outcome)) === 'release') throw ROLLBACK;
          if (!outcome!.ok) {
            // A failure the policy stores: its writes go, and the failure completes in this same
            // transaction, under the row lock, so nobody takes the row over in between.
            if (!undoHandlerWrites) throw ROLLBACK;
            await undoHandlerWrites();
          }
          const stored = this.sealer.storable(scoped.id, policy, response);
          if (!(await this.durable().complete(scoped.id, ownerToken, stored, transaction))) {
            throw new IdempotencyClaimLostError(scoped.id);
          }
          committed = stored;
        },
        transactionOptions,
      );
    } catch (error) {
      if (error === ROLLBACK) {
        // The business writes are rolled back; the outcome policy still decides the record. A
        // stored failure whose claim was taken over meanwhile must not reach its client as the
        // key's answer: another request now owns the key (409, retry).
        const finished = await this.settlement.settle(claim, response, execution.override(outcome));
        if (this.rolledBackByConflict(outcome)) return ROLLED_BACK_BY_CONFLICT;
        return finished === 'lost' && outcome
          ? { kind: 'replaced', reason: 'lost', retryAfterSeconds: 1 }
          : { kind: 'sent' };
      }
      this.claims.drop(claim);
      const retryAfterSeconds = leaseSeconds(policy.leaseMs);
      if (error instanceof IdempotencyClaimLostError) {
        this.telemetry.lostLease(claim, 'transaction');
        return outcome
          ? { kind: 'replaced', reason: 'lost', retryAfterSeconds: 1 }
          : { kind: 'not-run', reason: 'lost', retryAfterSeconds: 1 };
      }
      if (!outcome || this.isConflict(error)) {
        // The transaction never started (nothing ran), or the database rolled it back to resolve
        // a conflict (a serialization failure, the COMMIT's included): the key is freed for the retry.
        this.telemetry.storeError(scoped, {
          phase: 'transaction',
          outcome: outcome ? 'rolled_back' : 'not_run',
          error,
        });
        await this.settlement.release(claim).catch(() => undefined);
        return outcome
          ? ROLLED_BACK_BY_CONFLICT
          : { kind: 'not-run', reason: 'store-unavailable', retryAfterSeconds: 1 };
      }
      // The commit may or may not have happened: keep the claim; after its lease, recovery reads
      // the durable row and replays what committed or runs again what did not.
      this.telemetry.storeError(scoped, { phase: 'transaction', outcome: 'claim_kept_until_lease_lapses', error });
      return { kind: 'replaced', reason: 'store-unavailable', retryAfterSeconds };
    }
    this.claims.drop(claim);
    await this.settlement.mirrorCompletion(claim, committed!);
    return { kind: 'sent' };
  }

  /** A serialization failure or deadlock, as the durable store recognises them. */
  private isConflict(error: unknown): boolean {
    return error !== ROLLBACK && this.durable().isSerializationFailure?.(error) === true;
  }

  /** The handler failed because the database rolled its transaction back (its own statement met a conflict). */
  private rolledBackByConflict(outcome: HandlerOutcome | undefined): boolean {
    return outcome !== undefined && !outcome.ok && this.isConflict(outcome.error);
  }

  /**
   * The claim's row was inserted as the first statement of this transaction
   * (`DurableIdempotencyStore.claimInTransaction`): the handler runs in it after a savepoint, the
   * row completes in it, and one COMMIT makes both visible. Every path ends the transaction.
   */
  private async executeInClaimTransaction(
    claim: IdempotencyClaim,
    transaction: DurableClaimTransaction,
    execution: Execution,
  ): Promise<ExecutionResult> {
    const { scoped, policy } = claim;
    let outcome: HandlerOutcome | undefined;
    let response: StoredResponse | undefined;
    let stored: StoredResponse | undefined;
    let ran = false;
    let adapterFailed = false;
    try {
      await this.observed.transaction(scoped.id, transaction, async () => {
        const undoHandlerWrites = await transaction.savepoint();
        ran = true;
        // The store may run the handler in the context the claim was made in (sql.js: inside its
        // exclusive section); the handler's spans still belong under this transaction's.
        const trace = otelContext.active();
        try {
          await transaction.run(() =>
            this.running.run(this.telemetry.operationOf(scoped), () =>
              otelContext.with(trace, async () => {
                const settled = execution.run(transaction.manager).then((value) => (outcome = value));
                try {
                  response = await execution.response(settled);
                } finally {
                  // The handler's statements run on the transaction's connection: it ends after them.
                  await settled.catch(() => undefined);
                }
              }),
            ),
          );
        } catch (error) {
          adapterFailed = true;
          throw error;
        }
        // Committed ⇔ completed (docs/contract.md B.7 rule 17a): a failure or a success the policy
        // does not keep rolls the handler's writes back, and the claim with them.
        if (!response) throw ROLLBACK;
        if (decideOutcome(response.statusCode, policy, execution.override(outcome)) === 'release') throw ROLLBACK;
        // A failure the policy stores: its writes go, the claim stays, and it completes in this
        // same transaction, so no other request can claim the key in between.
        if (!outcome!.ok) await undoHandlerWrites();
        const completion = this.sealer.storable(scoped.id, policy, response);
        if (!(await this.observed.complete(transaction, completion))) throw new IdempotencyClaimLostError(scoped.id);
        stored = completion;
      });
    } catch (error) {
      await transaction.rollback(); // a no-op once the commit was sent
      this.claims.drop(claim);
      if (this.isConflict(error) || (error === ROLLBACK && this.rolledBackByConflict(outcome))) {
        // The database rolled the transaction back to resolve a conflict (a serialization failure
        // or a deadlock, in the claim, the handler, the completion or the COMMIT): nothing
        // committed, so this is a definite rollback, never an unknown outcome. The key is freed.
        await this.settlement.abandon(claim).catch(() => undefined);
        return ROLLED_BACK_BY_CONFLICT;
      }
      if (stored) {
        // The COMMIT itself failed: it may or may not have happened. Keep the fast claim; after its
        // lease, recovery reads the durable row and replays what committed or runs what did not.
        this.telemetry.storeError(scoped, { phase: 'transaction', outcome: 'claim_kept_until_lease_lapses', error });
        return { kind: 'replaced', reason: 'store-unavailable', retryAfterSeconds: leaseSeconds(policy.leaseMs) };
      }
      // Nothing committed: the durable claim went with the rollback, and the fast claim is freed.
      await this.settlement.abandon(claim).catch(() => undefined);
      if (error === ROLLBACK) return { kind: 'sent' };
      // The adapter could not say what the handler answered: as on other routes, its error stands.
      if (adapterFailed) throw error;
      if (error instanceof IdempotencyClaimLostError) {
        this.telemetry.lostLease(claim, 'transaction');
        return { kind: 'replaced', reason: 'lost', retryAfterSeconds: 1 };
      }
      this.telemetry.storeError(scoped, { phase: 'transaction', outcome: ran ? 'not_committed' : 'not_run', error });
      return ran
        ? { kind: 'replaced', reason: 'store-unavailable', retryAfterSeconds: 1 }
        : { kind: 'not-run', reason: 'store-unavailable', retryAfterSeconds: 1 };
    }
    this.claims.drop(claim);
    await this.settlement.mirrorCompletion(claim, stored!);
    return { kind: 'sent' };
  }
}

/** What a request rolled back by a serialization failure or deadlock answers: `503`, retry at once. */
const ROLLED_BACK_BY_CONFLICT: ExecutionResult = {
  kind: 'replaced',
  reason: 'store-unavailable',
  retryAfterSeconds: 1,
};

function leaseSeconds(leaseMs: number): number {
  return Math.max(1, Math.ceil(leaseMs / 1000));
}
