import { Inject, Injectable, OnApplicationShutdown, Optional } from '@nestjs/common';
import { createHash } from 'node:crypto';
import { IdempotencyClaimLostError } from '../errors/idempotency-claim-lost.error.js';
import { forcedOutcomeOf } from '../errors/idempotency-outcome.errors.js';
import { IdempotencyRunError } from '../errors/idempotency-run.error.js';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import { buildProblem } from '../errors/idempotency.exceptions.js';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import { IdempotencyRecordUnreadableError } from '../errors/idempotency-record-unreadable.error.js';
import { PROBLEM_CONTENT_TYPE } from '../idempotency.constants.js';
import { resolvePolicy, type ResolvedModuleSettings, type ResolvedPolicy } from '../idempotency.options.js';
import type { IdempotentOptions } from '../interfaces/idempotency-module-options.interface.js';
import { IDEMPOTENCY_SETTINGS } from '../idempotency.tokens.js';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import { isSealedBody } from '../security/idempotency-cipher.js';
import { DurableIdempotencyStore } from '../stores/durable-idempotency-store.js';
import { IdempotencyStore, type ClaimRequest } from '../stores/idempotency-store.js';
import { IdempotencyTelemetry, type TelemetryLabels } from '../telemetry/idempotency-telemetry.js';
import { decideOutcome, type OutcomeOverride } from './outcome-policy.js';
import { newOwnerToken } from './owner-token.js';
import { IdempotencyContextRef } from './idempotency-context.js';
import { decodeRunBody, encodeRunFailure, encodeRunValue, unencodableRunValue } from './run-codec.js';
import { buildScopedKey, type ScopeDimension, type ScopedKey } from './scoped-key.js';

/** What `begin` needs: who the key belongs to, what was asked, and the route's policy. */
export interface BeginRequest {
  scoped: ScopedKey;
  fingerprint: string;
  policy: ResolvedPolicy;
  /** Operation and tenant, for metrics, spans and logs only; never part of the identity. */
  labels?: TelemetryLabels;
}

/**
 * The engine's verdict on a request (DESIGN "The flow of one request"):
 * - `claimed`: run the handler (`execute`), or `finish` / `abandon` the claim yourself;
 * - `replay`: answer the stored response;
 * - `mismatch`: the key was used with another payload;
 * - `in-progress`: the original still runs under a live lease;
 * - `replay-unavailable`: completed, but the body was not stored;
 * - `outcome-unknown`: a dead lease under `staleLock: 'fail'`; the 500 is now the stored result.
 *
 * @publicApi
 */
export type BeginResult =
  | { kind: 'claimed'; claim: IdempotencyClaim }
  | { kind: 'replay'; response: StoredResponse }
  | { kind: 'mismatch' }
  | { kind: 'in-progress'; retryAfterSeconds: number }
  | { kind: 'replay-unavailable'; response: StoredResponse }
  | { kind: 'outcome-unknown'; response: StoredResponse };

/**
 * A call of `IdempotencyService.run()`: any code path (a message consumer, a webhook, a job)
 * that must take effect once per key.
 *
 * @publicApi
 */
export interface RunRequest {
  /** The operation, e.g. the consumer's name (`'billing.order-created'`): part of the scope. */
  operation: string;
  /** The key: an event id, a job id, a message id (never a broker offset). */
  key: string;
  /** Tenant the key belongs to, when keys are per tenant. */
  tenant?: string;
  /** Principal the key belongs to, when keys are per principal. */
  principal?: string;
  /** What a retry must repeat exactly (e.g. the message body); default: only the key counts. */
  fingerprint?: string | Buffer;
  /** Policy of this call (leases, TTL, `durable`, `transactional`, `inProgress`), over the module's. */
  options?: IdempotentOptions;
}

/**
 * What `run()` returns: the function's value, `fresh` when it ran now, `replayed` when an
 * earlier run's stored value is returned instead (as JSON: a `Date` comes back as a string).
 *
 * @publicApi
 */
export type RunResult<T> = { status: 'fresh'; value: T } | { status: 'replayed'; value: T };

/** How a claim ended: `stored` (replayable), `released` (key free again) or `lost` (fenced out). */
export type FinishResult = 'stored' | 'released' | 'lost';

/** How the handler ended, as the adapter saw it. */
export type HandlerOutcome = { ok: true; value: unknown } | { ok: false; error: unknown };

/**
 * What `execute` needs from an adapter: how to run the handler (with the transaction's ORM handle
 * on transactional routes), how to wait for the response it produced (undefined: none will come,
 * e.g. the client went away), and which outcome was forced. The response may be complete before
 * the handler settles (a handler that writes the response itself and then waits for it), so
 * `response` gets the handler's outcome as a promise, and `override` gets it only if it settled.
 *
 * @publicApi
 */
export interface Execution {
  run(manager: unknown): Promise<HandlerOutcome>;
  response(outcome: Promise<HandlerOutcome>): Promise<StoredResponse | undefined>;
  override(outcome: HandlerOutcome | undefined): OutcomeOverride | undefined;
}

/**
 * The result of `execute`: `sent` (the response stands), `replaced` (it must not be sent: the
 * transaction did not commit, send `response` instead), or `not-run` (the claim was lost before
 * the handler started; `response` is the answer).
 *
 * @publicApi
 */
export type ExecutionResult =
  | { kind: 'sent' }
  | { kind: 'replaced'; reason: 'lost' | 'store-unavailable'; retryAfterSeconds: number }
  | { kind: 'not-run'; reason: 'lost' | 'store-unavailable'; retryAfterSeconds: number };

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
 *
 * @publicApi
 */
export class IdempotencyClaim {
  /** The pending beat of each tier. */
  private readonly beats = new Set<NodeJS.Timeout>();
  private beating = false;
  private lostClaim = false;

  constructor(
    readonly scoped: ScopedKey,
    readonly record: IdempotencyRecord,
    readonly policy: ResolvedPolicy,
    /** True when this claim took over a dead lease (the handler runs again). */
    readonly tookOver: boolean,
  ) {}

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
          new Promise<boolean>((resolve) => resolve(renewal.renew())).then(
            (renewed) => {
              pending -= 1;
              if (!renewed) onRefusal();
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

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

/** A waiter re-reads the record at least this often, even without a notification. */
const WAIT_POLL_CEILING_MS = 1000;

/** Thrown inside a transaction to roll it back on purpose; never escapes the engine. */
const ROLLBACK = Symbol('rollback');

/**
 * The transport-agnostic engine: claim → run → complete or release, replays, mismatches,
 * in-progress answers, leases with heartbeats, recovery of dead leases, and the durable tier as
 * the authority on `durable` routes. Every write is fenced by the claim's owner token. It knows
 * nothing of HTTP: adapters map its results.
 *
 * @publicApi
 */
@Injectable()
export class IdempotencyService implements OnApplicationShutdown {
  private readonly liveClaims = new Set<IdempotencyClaim>();
  /** Metrics, spans and structured logs (a no-op until the application registers an OpenTelemetry SDK). */
  readonly telemetry: IdempotencyTelemetry;

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
        result = await this.judge(request, claimed.record, claimed.nowMs, claimRequest);
      } else if (policy.durable) {
        result = await this.confirmDurable(request, claimRequest);
      } else {
        result = this.hold(request.scoped, claimed.record, policy, false);
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
    return this.telemetry.observeRun(request, () => this.runOnce(request, fn));
  }

  private async runOnce<T>(request: RunRequest, fn: (context: IdempotencyContextRef) => Promise<T> | T): Promise<RunResult<T>> {
    const policy = resolvePolicy(this.settings.policyOptions, request.options);
    const scope: ScopeDimension[] = ['operation'];
    if (request.tenant !== undefined) scope.push('tenant');
    if (request.principal !== undefined) scope.push('principal');
    const scoped = buildScopedKey(
      { operation: request.operation, tenant: request.tenant, principal: request.principal, key: request.key },
      scope,
    );
    const fingerprint = createHash('sha256').update(request.fingerprint ?? '').digest('base64url');
    const begun = await this.begin({ scoped, fingerprint, policy, labels: { operation: request.operation, tenant: request.tenant } });
    switch (begun.kind) {
      case 'claimed':
        return this.runClaimed(begun.claim, fn);
      case 'replay': {
        const { response } = begun;
        if (response.statusCode >= 200 && response.statusCode < 300) {
          return { status: 'replayed', value: decodeRunBody(response) as T };
        }
        throw new IdempotencyRunError('replayed-failure', `An earlier run with this key failed with ${response.statusCode}; the failure is stored.`, {
          status: response.statusCode,
          body: decodeRunBody(response),
        });
      }
      case 'mismatch':
        throw new IdempotencyRunError('key-reused', 'This key was already used with a different fingerprint.');
      case 'in-progress':
        throw new IdempotencyRunError('in-progress', 'A run with this key is still in progress.', {
          retryAfterSeconds: begun.retryAfterSeconds,
        });
      case 'replay-unavailable':
        throw new IdempotencyRunError('replay-unavailable', 'A run with this key completed, but its result was not stored.');
      case 'outcome-unknown':
        throw new IdempotencyRunError('outcome-unknown', 'A run with this key stopped before it finished; its outcome is unknown.');
    }
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
        await this.settle(claim, undefined, undefined);
        throw error;
      }
      await this.settle(claim, response, execution.override(settled));
      return { kind: 'sent' };
    }
    return this.executeInTransaction(claim, execution);
  }

  /**
   * Ends a claim with the handler's response: stores it (later retries replay it) or releases
   * the key, as the outcome policy and `override` decide (docs/contract.md B.7). Fenced: a claim that
   * lost its record writes nothing and returns `lost`. On durable routes the durable store
   * decides, and the fast tier follows.
   */
  async finish(claim: IdempotencyClaim, response: StoredResponse, override?: OutcomeOverride): Promise<FinishResult> {
    this.drop(claim);
    if (decideOutcome(response.statusCode, claim.policy, override) === 'release') {
      return this.releaseClaim(claim);
    }
    return this.telemetry.observeFinish('complete', claim, () => this.completeClaim(claim, this.storable(claim.scoped.id, claim.policy, response)));
  }

  private async completeClaim(claim: IdempotencyClaim, stored: StoredResponse): Promise<FinishResult> {
    if (claim.policy.durable) {
      const completed = await this.durable().complete(claim.scoped.id, claim.ownerToken, stored);
      if (!completed) {
        this.logLost(claim, 'complete');
        return 'lost';
      }
      await this.mirrorCompletion(claim, stored);
      return 'stored';
    }
    const completed = await this.store.complete(claim.scoped.id, claim.ownerToken, stored);
    if (!completed) this.logLost(claim, 'complete');
    else this.telemetry.recordStored(claim, stored);
    return completed ? 'stored' : 'lost';
  }

  /** Frees the key without a response (the handler failed before one existed). */
  async abandon(claim: IdempotencyClaim): Promise<FinishResult> {
    this.drop(claim);
    return this.releaseClaim(claim);
  }

  private async runClaimed<T>(claim: IdempotencyClaim, fn: (context: IdempotencyContextRef) => Promise<T> | T): Promise<RunResult<T>> {
    const context = new IdempotencyContextRef(claim);
    let outcome: HandlerOutcome | undefined;
    let unencodable: unknown;
    const result = await this.execute(claim, {
      run: async (manager) => {
        context.attachManager(manager);
        try {
          outcome = { ok: true, value: await fn(context) };
        } catch (error) {
          outcome = { ok: false, error };
        }
        return outcome;
      },
      response: async (ran) => {
        const settled = await ran;
        if (!settled.ok) return encodeRunFailure(settled.error);
        try {
          return encodeRunValue(settled.value);
        } catch (error) {
          // The function ran and its effect stands; only its result cannot be kept. The key is
          // completed without it at once (retries get `replay-unavailable`, nothing runs twice),
          // instead of staying claimed and renewed while the process lives (docs/contract.md B.7 rule 17a).
          unencodable = error;
          return unencodableRunValue();
        }
      },
      override: (settled) => context.outcome ?? (settled && !settled.ok ? forcedOutcomeOf(settled.error) : undefined),
    });
    if (result.kind !== 'sent' && result.reason === 'lost') {
      throw new IdempotencyRunError('in-progress', 'This run lost its claim to a newer one.', {
        retryAfterSeconds: result.retryAfterSeconds,
      });
    }
    if (result.kind !== 'sent') {
      throw new IdempotencyStoreError('The transaction of this run could not be started or committed; retry later.', 'durable');
    }
    if (!outcome!.ok) throw outcome!.error;
    if (unencodable !== undefined) {
      const reason = unencodable instanceof Error ? unencodable.message : String(unencodable);
      throw new IdempotencyRunError(
        'result-unencodable',
        `The function ran, but its result cannot be stored as JSON (${reason}); the key is completed without it, and retries get replay-unavailable.`,
      );
    }
    return { status: 'fresh', value: outcome!.value as T };
  }

  /**
   * What the outcome policy made of `error`, thrown by the function of `run(request, fn)`:
   * `store` (later runs get `replayed-failure`) or `release` (a later run runs `fn` again).
   * Message adapters settle by it: acknowledge a stored failure, redeliver a released one.
   */
  failureOutcome(request: RunRequest, error: unknown, context?: IdempotencyContextRef): OutcomeOverride {
    const policy = resolvePolicy(this.settings.policyOptions, request.options);
    return decideOutcome(encodeRunFailure(error).statusCode, policy, context?.outcome ?? forcedOutcomeOf(error));
  }

  onApplicationShutdown(): void {
    for (const claim of this.liveClaims) claim.stopHeartbeat();
    this.liveClaims.clear();
  }

  private async settle(
    claim: IdempotencyClaim,
    response: StoredResponse | undefined,
    override: OutcomeOverride | undefined,
  ): Promise<void> {
    try {
      if (response) await this.finish(claim, response, override);
      else await this.abandon(claim);
    } catch (error) {
      this.drop(claim);
      this.telemetry.storeError(claim.scoped, { phase: 'finish', outcome: 'lease_lapses_then_recovery', error });
    }
  }

  private async executeInTransaction(claim: IdempotencyClaim, execution: Execution): Promise<ExecutionResult> {
    const { scoped, ownerToken, policy } = claim;
    let outcome: HandlerOutcome | undefined;
    let response: StoredResponse | undefined;
    let committed: StoredResponse | undefined;
    try {
      await this.durable().transaction(scoped.id, ownerToken, async (transaction) => {
        const ran = execution.run(transaction.manager).then((value) => (outcome = value));
        response = await execution.response(ran);
        await ran;
        // Committed ⇔ completed (docs/contract.md B.7 rule 17a): whatever frees the key, a failure or a
        // success the policy does not keep, rolls the handler's writes back with it.
        if (!response || !outcome!.ok) throw ROLLBACK;
        if (decideOutcome(response.statusCode, policy, execution.override(outcome)) === 'release') throw ROLLBACK;
        const stored = this.storable(scoped.id, policy, response);
        if (!(await this.durable().complete(scoped.id, ownerToken, stored, transaction))) {
          throw new IdempotencyClaimLostError(scoped.id);
        }
        committed = stored;
      });
    } catch (error) {
      if (error === ROLLBACK) {
        // The business writes are rolled back; the outcome policy still decides the record.
        await this.settle(claim, response, execution.override(outcome));
        return { kind: 'sent' };
      }
      this.drop(claim);
      const retryAfterSeconds = Math.max(1, Math.ceil(policy.leaseMs / 1000));
      if (error instanceof IdempotencyClaimLostError) {
        this.logLost(claim, 'transaction');
        return outcome
          ? { kind: 'replaced', reason: 'lost', retryAfterSeconds: 1 }
          : { kind: 'not-run', reason: 'lost', retryAfterSeconds: 1 };
      }
      if (!outcome) {
        // The transaction never started: nothing ran, so the key is freed for the retry.
        this.telemetry.storeError(scoped, { phase: 'transaction', outcome: 'not_run', error });
        await this.releaseClaim(claim).catch(() => undefined);
        return { kind: 'not-run', reason: 'store-unavailable', retryAfterSeconds: 1 };
      }
      // The commit may or may not have happened: keep the claim; after its lease, recovery reads
      // the durable row and replays what committed or runs again what did not.
      this.telemetry.storeError(scoped, { phase: 'transaction', outcome: 'claim_kept_until_lease_lapses', error });
      return { kind: 'replaced', reason: 'store-unavailable', retryAfterSeconds };
    }
    this.drop(claim);
    await this.mirrorCompletion(claim, committed!);
    return { kind: 'sent' };
  }

  private async judge(
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
      const committed = request.policy.durable && !afterTakeover ? await this.committedAnswer(request, record) : undefined;
      return committed ?? { kind: 'in-progress', retryAfterSeconds: this.retryAfter(request.policy, record, nowMs) };
    }
    return request.policy.durable
      ? this.recoverThroughDurable(request, record, claimRequest)
      : this.recoverDeadLease(request, record, claimRequest);
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
    if (row.ownerToken === record.ownerToken) await this.store.complete(id, record.ownerToken, row.response).catch(() => undefined);
    return this.replayOf(id, row);
  }

  private replayOf(id: string, record: IdempotencyRecord): BeginResult {
    if (!record.response) throw new IdempotencyStoreError('A completed record has no response: inspect or delete it.');
    const response = this.open(id, record.response);
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
      return this.hold(scoped, taken.record, policy, true);
    }
    const response = this.outcomeUnknownResponse();
    const completed = await this.store.complete(scoped.id, taken.record.ownerToken, this.seal(scoped.id, response)).catch(async (error: unknown) => {
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
    return this.confirmDurable(request, claimRequest);
  }

  /**
   * We hold the fast claim of a durable route: insert the durable row. If one exists, the fast
   * tier had lost the record (eviction, failover, flush) or its owner died: the row decides.
   * Redis alone never decides that a durable route runs (DESIGN step 4).
   */
  private async confirmDurable(request: BeginRequest, claimRequest: ClaimRequest): Promise<BeginResult> {
    const { scoped, policy } = request;
    const durable = this.durable();
    try {
      const claimed = await durable.claim(scoped.id, claimRequest);
      if (claimed.kind === 'claimed') return this.hold(scoped, claimed.record, policy, false);
      const row = claimed.record;
      if (row.fingerprint !== request.fingerprint || row.state === 'completed' || row.leaseExpiresAtMs > claimed.nowMs) {
        return await this.answerFromDurable(request, row, claimed.nowMs, claimRequest.ownerToken);
      }
      return await this.recoverDurableRow(request, row, claimRequest);
    } catch (error) {
      await this.store.release(scoped.id, claimRequest.ownerToken).catch(() => undefined);
      throw error;
    }
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
    return { kind: 'in-progress', retryAfterSeconds: this.retryAfter(request.policy, row, nowMs) };
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
      return this.hold(scoped, taken.record, policy, true);
    }
    const response = this.outcomeUnknownResponse();
    const sealed = this.seal(scoped.id, response);
    const completed = await durable.complete(scoped.id, claimRequest.ownerToken, sealed).catch(async (error: unknown) => {
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

  private hold(scoped: ScopedKey, record: IdempotencyRecord, policy: ResolvedPolicy, tookOver: boolean): BeginResult {
    const claim = new IdempotencyClaim(scoped, record, policy, tookOver);
    claim.startHeartbeat(this.leaseRenewals(claim), () => this.logLost(claim, 'heartbeat'));
    this.liveClaims.add(claim);
    return { kind: 'claimed', claim };
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
    if (!policy.durable) return [fast];
    return [fast, { tier: 'durable', decisive: true, renew: () => this.durable().extend(scoped.id, ownerToken, policy.leaseMs) }];
  }

  /** After the durable row completed: the fast tier follows, and its failure changes nothing. */
  private async mirrorCompletion(claim: IdempotencyClaim, stored: StoredResponse): Promise<void> {
    const { scoped, ownerToken, record } = claim;
    this.telemetry.recordStored(claim, stored);
    try {
      if (await this.store.complete(scoped.id, ownerToken, stored)) return;
      await this.store.restore(scoped.id, { ...record, state: 'completed', ownerToken, response: stored });
    } catch (error) {
      this.telemetry.storeError(scoped, { phase: 'mirror_completion', outcome: 'durable_record_answers', error });
    }
  }

  private drop(claim: IdempotencyClaim): void {
    claim.stopHeartbeat();
    this.liveClaims.delete(claim);
  }

  private releaseClaim(claim: IdempotencyClaim): Promise<FinishResult> {
    return this.telemetry.observeFinish('release', claim, () => this.freeKey(claim));
  }

  private async freeKey(claim: IdempotencyClaim): Promise<FinishResult> {
    const { scoped, ownerToken, policy } = claim;
    if (policy.durable) {
      const released = await this.durable().release(scoped.id, ownerToken);
      await this.store.release(scoped.id, ownerToken).catch(() => undefined);
      if (!released) this.logLost(claim, 'release');
      return released ? 'released' : 'lost';
    }
    const released = await this.store.release(scoped.id, ownerToken);
    if (!released) this.logLost(claim, 'release');
    return released ? 'released' : 'lost';
  }

  /** What a store keeps of `response`: without an oversized body (B.8 rule 23), sealed when encryption is on. */
  private storable(id: string, policy: ResolvedPolicy, response: StoredResponse): StoredResponse {
    const kept =
      response.body && response.body.length > policy.maxStoredResponseBytes
        ? { statusCode: response.statusCode, headers: response.headers, bodyOmitted: true }
        : response;
    return this.seal(id, kept);
  }

  private seal(id: string, response: StoredResponse): StoredResponse {
    return this.settings.cipher ? this.settings.cipher.seal(id, response) : response;
  }

  /** The stored response in clear, or IdempotencyRecordUnreadableError: never replay what does not open. */
  private open(id: string, stored: StoredResponse): StoredResponse {
    try {
      if (this.settings.cipher) return this.settings.cipher.open(id, stored);
      if (isSealedBody(stored.body)) {
        throw new IdempotencyRecordUnreadableError('the stored response is encrypted, but no `encryption` is configured', 'no-cipher');
      }
      return stored;
    } catch (error) {
      if (error instanceof IdempotencyRecordUnreadableError) this.telemetry.unreadableRecord(id, error.message);
      throw error;
    }
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
      throw new IdempotencyConfigurationError('durable and transactional need a durable store: pass `durableStore` to IdempotencyModule.');
    }
    return policy;
  }

  private durable(): DurableIdempotencyStore {
    if (!this.durableStore) {
      throw new IdempotencyConfigurationError('no durable store is configured: pass `durableStore` to IdempotencyModule.');
    }
    return this.durableStore;
  }

  private retryAfter(policy: ResolvedPolicy, record: IdempotencyRecord, nowMs: number): number {
    const { retryAfterSeconds, maxRetryAfterSeconds } = policy.inProgress;
    if (retryAfterSeconds !== undefined) return retryAfterSeconds;
    const remaining = Math.ceil((record.leaseExpiresAtMs - nowMs) / 1000);
    return Math.min(Math.max(remaining, 1), maxRetryAfterSeconds);
  }

  private outcomeUnknownResponse(): StoredResponse {
    const problem = buildProblem('idempotency-outcome-unknown', this.settings.problemTypeBaseUri);
    return {
      statusCode: problem.status,
      headers: {
        'content-type': PROBLEM_CONTENT_TYPE,
        'content-language': this.settings.problemLanguage,
        'cache-control': 'no-store',
      },
      body: Buffer.from(JSON.stringify(problem)),
    };
  }

  private logLost(claim: IdempotencyClaim, phase: string): void {
    this.telemetry.lostLease(claim, phase);
  }
}
