import { Inject, Injectable, OnApplicationShutdown, Optional } from '@nestjs/common';
import { IdempotencyNestedTransactionError } from '../errors/idempotency-transaction.errors.js';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import { resolvePolicy, type ResolvedModuleSettings, type ResolvedPolicy } from '../idempotency.options.js';
import type { IdempotentOptions } from '../interfaces/idempotency-module-options.interface.js';
import { IDEMPOTENCY_SETTINGS } from '../idempotency.tokens.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import { DurableIdempotencyStore } from '../stores/durable-idempotency-store.js';
import { IdempotencyStore, type ClaimRequest } from '../stores/idempotency-store.js';
import { IdempotencyTelemetry } from '../telemetry/idempotency-telemetry.js';
import { ClaimSettlement } from './claim-settlement.js';
import type { IdempotencyClaim } from './idempotency-claim.js';
import type { IdempotencyContextRef } from './idempotency-context.js';
import type {
  BeginRequest,
  BeginResult,
  Execution,
  ExecutionResult,
  FinishResult,
  HandlerOutcome,
  RunRequest,
  RunResult,
} from './idempotency-engine.types.js';
import { IdempotencyRecovery } from './idempotency-recovery.js';
import { IdempotencyRunner } from './idempotency-runner.js';
import { IdempotencyTransaction } from './idempotency-transaction.js';
import { LiveClaims } from './live-claims.js';
import type { OutcomeOverride } from './outcome-policy.js';
import { newOwnerToken } from './owner-token.js';
import { StoredResponseSealer } from './stored-response-sealer.js';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

/** A waiter re-reads the record at least this often, even without a notification. */
const WAIT_POLL_CEILING_MS = 1000;

/**
 * The transport-agnostic engine: claim → run → complete or release, replays, mismatches,
 * in-progress answers, leases with heartbeats, recovery of dead leases, and the durable tier as
 * the authority on `durable` routes. Every write is fenced by the claim's owner token. It knows
 * nothing of HTTP: adapters map its results.
 *
 * This class is the adapter protocol (`begin`, `execute`, `finish`, `abandon`) and `run()`; the
 * work is done by the collaborators it builds: `LiveClaims` (heartbeats), `IdempotencyRecovery`
 * (existing records and dead leases), `ClaimSettlement` (complete or release),
 * `IdempotencyTransaction` (transactional routes), `IdempotencyRunner` (`run()`) and
 * `StoredResponseSealer` (encryption).
 *
 * @publicApi
 */
@Injectable()
export class IdempotencyService implements OnApplicationShutdown {
  /** Metrics, spans and structured logs (a no-op until the application registers an OpenTelemetry SDK). */
  readonly telemetry: IdempotencyTelemetry;
  private readonly claims: LiveClaims;
  private readonly recovery: IdempotencyRecovery;
  private readonly settlement: ClaimSettlement;
  private readonly transaction: IdempotencyTransaction;
  private readonly runner: IdempotencyRunner;

  constructor(
    readonly store: IdempotencyStore,
    @Inject(IDEMPOTENCY_SETTINGS) private readonly settings: ResolvedModuleSettings,
    @Optional() @Inject(DurableIdempotencyStore) readonly durableStore?: DurableIdempotencyStore | null,
    @Optional() telemetry?: IdempotencyTelemetry,
  ) {
    // Store calls are measured here, at the engine boundary, so every store is measured alike.
    this.telemetry = telemetry ?? new IdempotencyTelemetry();
    this.store = this.telemetry.instrumentStore(store, 'fast');
    this.durableStore = durableStore && this.telemetry.instrumentStore(durableStore, 'durable');
    const durable = () => this.durable();
    const sealer = new StoredResponseSealer(settings.cipher, this.telemetry);
    this.claims = new LiveClaims(this.store, durable, this.telemetry);
    this.settlement = new ClaimSettlement(this.store, durable, this.telemetry, this.claims, sealer);
    this.transaction = new IdempotencyTransaction(durable, this.telemetry, this.claims, this.settlement, sealer);
    this.recovery = new IdempotencyRecovery(this.store, durable, this.telemetry, this.claims, sealer, () =>
      settings.outcomeUnknownResponse(),
    );
    this.runner = new IdempotencyRunner(this, settings, this.telemetry);
  }

  /**
   * Claims the key or tells why the handler must not run. Store failures reject with
   * `IdempotencyStoreError`; the caller applies `onStoreError`.
   */
  begin(request: BeginRequest): Promise<BeginResult> {
    return this.telemetry.observeBegin(request, () => this.decide(request));
  }

  private async decide(request: BeginRequest): Promise<BeginResult> {
    const { policy } = request;
    if (policy.durable && !this.durableStore) {
      throw new IdempotencyConfigurationError(
        'a durable or transactional route needs a durable store: pass `durableStore` to IdempotencyModule.',
      );
    }
    const outer = policy.transactional ? this.transaction.activeOperation() : undefined;
    if (outer !== undefined) {
      throw new IdempotencyNestedTransactionError(request.labels?.operation ?? policy.operation ?? 'run()', outer);
    }
    const waitUntil = policy.inProgress.mode === 'wait' ? Date.now() + policy.inProgress.maxWaitMs : 0;
    for (;;) {
      const claimRequest: ClaimRequest = {
        ownerToken: newOwnerToken(),
        fingerprint: request.fingerprint,
        leaseMs: policy.leaseMs,
        ttlMs: policy.ttlMs,
      };
      const claimed = await this.store.claim(request.scoped.id, claimRequest);
      let result: BeginResult;
      if (claimed.kind === 'existing') {
        result = await this.recovery.judge(request, claimed.record, claimed.nowMs, claimRequest);
      } else if (policy.durable) {
        result = await this.recovery.confirmDurable(request, claimRequest);
      } else {
        result = this.claims.hold(request.scoped, claimed.record, policy, false);
      }
      const remainingMs = waitUntil - Date.now();
      if (result.kind !== 'in-progress' || remainingMs <= 0) return result;
      const waitMs = Math.min(remainingMs, WAIT_POLL_CEILING_MS);
      // The fast tier had no record (the durable row answered): it has nothing to notify about.
      if (claimed.kind === 'claimed') await sleep(waitMs);
      else await this.store.waitForChange(request.scoped.id, waitMs);
    }
  }

  /**
   * Runs `fn` once per key, with the same states, leases, fencing, durability and outcome policy
   * as an HTTP route. Returns its value (`fresh`), or the stored value of an earlier run
   * (`replayed`). Throws `IdempotencyRunError` when it can do neither (`in-progress`: hand the
   * message back for later; `key-reused`; `replayed-failure`; ...), `IdempotencyStoreError` when
   * a store is unreachable, and whatever `fn` threw when `fn` failed.
   *
   * @example
   * const { status } = await idempotency.run({ operation: 'mailer.order-created', key: event.id }, () => mailer.send(event));
   */
  run<T>(request: RunRequest, fn: (context: IdempotencyContextRef) => Promise<T> | T): Promise<RunResult<T>> {
    return this.runner.run(request, fn);
  }

  /**
   * Runs a claimed request to its end: the handler, then its response's outcome (docs/contract.md B.7).
   * On `transactional` routes the handler runs inside a durable-store transaction and the
   * completed record commits in it; a failed or released outcome rolls the business writes back.
   * Never rejects: a store failure after the handler ran is logged, and the response stands
   * unless the transaction could not commit (`replaced`).
   */
  async execute(claim: IdempotencyClaim, observed: Execution): Promise<ExecutionResult> {
    const execution = this.telemetry.observeExecution(claim, observed);
    if (!claim.policy.transactional) {
      let settled: HandlerOutcome | undefined;
      const outcome = execution.run(undefined).then((value) => (settled = value));
      let response: StoredResponse | undefined;
      try {
        response = await execution.response(outcome);
      } catch (error) {
        // An adapter that cannot say what the handler answered must not leave the key claimed
        // (and renewed) for as long as the process lives: it is freed once the handler settled.
        await outcome;
        await this.settlement.settle(claim, undefined, undefined);
        throw error;
      }
      await this.settlement.settle(claim, response, execution.override(settled));
      return { kind: 'sent' };
    }
    return this.transaction.execute(claim, execution);
  }

  /**
   * Ends a claim with the handler's response: stores it (later retries replay it) or releases
   * the key, as the outcome policy and `override` decide (docs/contract.md B.7). Fenced: a claim that
   * lost its record writes nothing and returns `lost`. On durable routes the durable store
   * decides, and the fast tier follows.
   */
  finish(claim: IdempotencyClaim, response: StoredResponse, override?: OutcomeOverride): Promise<FinishResult> {
    return this.settlement.finish(claim, response, override);
  }

  /** Frees the key without a response (the handler failed before one existed). */
  abandon(claim: IdempotencyClaim): Promise<FinishResult> {
    return this.settlement.abandon(claim);
  }

  /**
   * What the outcome policy made of `error`, thrown by the function of `run(request, fn)`:
   * `store` (later runs get `replayed-failure`) or `release` (a later run runs `fn` again).
   * Message adapters settle by it: acknowledge a stored failure, redeliver a released one.
   */
  failureOutcome(request: RunRequest, error: unknown, context?: IdempotencyContextRef): OutcomeOverride {
    return this.runner.failureOutcome(request, error, context);
  }

  onApplicationShutdown(): void {
    this.claims.dropAll();
  }

  /**
   * The policy `run()` applies for `options` (over the module's options and the defaults),
   * checked: a value no store can hold, or a durable policy without a durable store, throws
   * `IdempotencyConfigurationError` naming the option. Message adapters call it when they are
   * set up, so a bad configuration stops the application at startup, not at its first message.
   */
  policyFor(options?: IdempotentOptions): ResolvedPolicy {
    const policy = resolvePolicy(this.settings.policyOptions, options);
    if (policy.durable && !this.durableStore) {
      throw new IdempotencyConfigurationError(
        'durable and transactional need a durable store: pass `durableStore` to IdempotencyModule.',
      );
    }
    return policy;
  }

  private durable(): DurableIdempotencyStore {
    if (!this.durableStore) {
      throw new IdempotencyConfigurationError(
        'no durable store is configured: pass `durableStore` to IdempotencyModule.',
      );
    }
    return this.durableStore;
  }
}
