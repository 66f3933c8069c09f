import { Inject, Injectable, Logger, OnApplicationShutdown } from '@nestjs/common';
import { buildProblem } from '../errors/idempotency.exceptions.js';
import { PROBLEM_CONTENT_TYPE } from '../idempotency.constants.js';
import type { ResolvedModuleSettings, ResolvedPolicy } from '../idempotency.options.js';
import { IDEMPOTENCY_SETTINGS } from '../idempotency.tokens.js';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import { IdempotencyStore, type ClaimRequest } from '../stores/idempotency-store.js';
import { decideOutcome, type OutcomeOverride } from './outcome-policy.js';
import { newOwnerToken } from './owner-token.js';
import type { ScopedKey } from './scoped-key.js';

/** What `begin` needs: who the key belongs to, what was asked, and the route's policy. */
export interface BeginRequest {
  scoped: ScopedKey;
  fingerprint: string;
  policy: ResolvedPolicy;
}

/**
 * The engine's verdict on a request (DESIGN "The flow of one request"):
 * - `claimed`: run the handler, then `finish` (or `abandon`) the claim;
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

/** How a claim ended: `stored` (replayable), `released` (key free again) or `lost` (fenced out). */
export type FinishResult = 'stored' | 'released' | 'lost';

/**
 * A claim this process holds on a record. While it lives, a heartbeat renews the lease; once the
 * store refuses a renewal, the claim is `lost` and the engine will not complete it.
 *
 * @publicApi
 */
export class IdempotencyClaim {
  private heartbeat?: NodeJS.Timeout;
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

  /** @internal */
  startHeartbeat(renew: () => Promise<boolean>, onLost: () => void): void {
    this.heartbeat = setInterval(() => {
      renew().then(
        (renewed) => {
          if (!renewed && !this.lostClaim) {
            this.lostClaim = true;
            this.stopHeartbeat();
            onLost();
          }
        },
        // A failed renewal is retried at the next beat; the lease still has two beats of slack.
        () => undefined,
      );
    }, this.policy.heartbeatMs);
    this.heartbeat.unref();
  }

  /** @internal */
  stopHeartbeat(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
  }
}

/** A waiter re-reads the record at least this often, even without a notification. */
const WAIT_POLL_CEILING_MS = 1000;

/**
 * The transport-agnostic engine: claim → run → complete or release, replays, mismatches,
 * in-progress answers, leases with heartbeats, and recovery of dead leases, every write fenced
 * by the claim's owner token. It knows nothing of HTTP: adapters map its results.
 *
 * @publicApi
 */
@Injectable()
export class IdempotencyService implements OnApplicationShutdown {
  private readonly logger = new Logger('Idempotency');
  private readonly liveClaims = new Set<IdempotencyClaim>();

  constructor(
    readonly store: IdempotencyStore,
    @Inject(IDEMPOTENCY_SETTINGS) private readonly settings: ResolvedModuleSettings,
  ) {}

  /**
   * Claims the key or tells why the handler must not run. Store failures reject with
   * `IdempotencyStoreError`; the caller applies `onStoreError`.
   */
  async begin(request: BeginRequest): Promise<BeginResult> {
    const { policy } = request;
    const claimRequest: ClaimRequest = {
      ownerToken: newOwnerToken(),
      fingerprint: request.fingerprint,
      leaseMs: policy.leaseMs,
      ttlMs: policy.ttlMs,
    };
    const waitUntil = policy.inProgress.mode === 'wait' ? Date.now() + policy.inProgress.maxWaitMs : 0;
    for (;;) {
      const claimed = await this.store.claim(request.scoped.id, claimRequest);
      const result =
        claimed.kind === 'claimed'
          ? this.hold(request.scoped, claimed.record, policy, false)
          : await this.judge(request, claimed.record, claimed.nowMs, claimRequest);
      const remainingMs = waitUntil - Date.now();
      if (result.kind !== 'in-progress' || remainingMs <= 0) return result;
      await this.store.waitForChange(request.scoped.id, Math.min(remainingMs, WAIT_POLL_CEILING_MS));
    }
  }

  /**
   * Ends a claim with the handler's response: stores it (later retries replay it) or releases
   * the key, as the outcome policy and `override` decide (CONTRACT B.7). Fenced: a claim that
   * lost its record writes nothing and returns `lost`.
   */
  async finish(claim: IdempotencyClaim, response: StoredResponse, override?: OutcomeOverride): Promise<FinishResult> {
    this.drop(claim);
    const { policy, scoped, ownerToken } = claim;
    if (decideOutcome(response.statusCode, policy, override) === 'release') {
      return this.releaseClaim(claim);
    }
    const stored =
      response.body && response.body.length > policy.maxStoredResponseBytes
        ? { statusCode: response.statusCode, headers: response.headers, bodyOmitted: true }
        : response;
    const completed = await this.store.complete(scoped.id, ownerToken, stored);
    if (!completed) this.logLost(claim, 'complete');
    return completed ? 'stored' : 'lost';
  }

  /** Frees the key without a response (the handler failed before one existed). */
  async abandon(claim: IdempotencyClaim): Promise<FinishResult> {
    this.drop(claim);
    return this.releaseClaim(claim);
  }

  onApplicationShutdown(): void {
    for (const claim of this.liveClaims) claim.stopHeartbeat();
    this.liveClaims.clear();
  }

  private async judge(
    request: BeginRequest,
    record: IdempotencyRecord,
    nowMs: number,
    claimRequest: ClaimRequest,
    afterTakeover = false,
  ): Promise<BeginResult> {
    // A mismatch beats in-progress: waiting would not help the client (CONTRACT B.5 step 5.3).
    if (record.fingerprint !== request.fingerprint) return { kind: 'mismatch' };
    if (record.state === 'completed') {
      const response = record.response;
      if (!response) throw new Error('A completed record has no response: the store broke its contract.');
      return response.bodyOmitted ? { kind: 'replay-unavailable', response } : { kind: 'replay', response };
    }
    if (record.leaseExpiresAtMs > nowMs || afterTakeover) {
      return { kind: 'in-progress', retryAfterSeconds: this.retryAfter(request.policy, record, nowMs) };
    }
    return this.recoverDeadLease(request, record, claimRequest);
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
      this.logger.warn(`takeover of a dead lease key=${scoped.id} fencing=${taken.record.fencingToken}`);
      return this.hold(scoped, taken.record, policy, true);
    }
    const response = this.outcomeUnknownResponse();
    const completed = await this.store.complete(scoped.id, taken.record.ownerToken, response);
    this.logger.warn(`dead lease stored as outcome-unknown key=${scoped.id} stored=${completed}`);
    return { kind: 'outcome-unknown', response };
  }

  private hold(scoped: ScopedKey, record: IdempotencyRecord, policy: ResolvedPolicy, tookOver: boolean): BeginResult {
    const claim = new IdempotencyClaim(scoped, record, policy, tookOver);
    claim.startHeartbeat(
      () => this.store.extend(scoped.id, record.ownerToken, policy.leaseMs),
      () => this.logLost(claim, 'heartbeat'),
    );
    this.liveClaims.add(claim);
    return { kind: 'claimed', claim };
  }

  private drop(claim: IdempotencyClaim): void {
    claim.stopHeartbeat();
    this.liveClaims.delete(claim);
  }

  private async releaseClaim(claim: IdempotencyClaim): Promise<FinishResult> {
    const released = await this.store.release(claim.scoped.id, claim.ownerToken);
    if (!released) this.logLost(claim, 'release');
    return released ? 'released' : 'lost';
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
    this.logger.warn(
      `lost claim key=${claim.scoped.id} fencing=${claim.fencingToken} phase=${phase}: another claim owns the record; this result is not stored`,
    );
  }
}
