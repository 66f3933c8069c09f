import type { ScopeDimension } from '../engine/scoped-key.js';
import type { IdempotencyRecordState } from '../interfaces/idempotency-record.interface.js';

/**
 * Names one record for `IdempotencyAdmin`: either the parts a request was scoped with (the
 * storage id is computed exactly as the engine computes it), or the storage id itself, as
 * `listInProgress` reports it.
 *
 * @publicApi
 */
export type IdempotencyRecordRef =
  | {
      /** The operation: `METHOD + route template` (`'POST /orders'`), or the route's / consumer's `operation`. */
      operation: string;
      /** The tenant the request resolved to, when `tenant` is in scope. */
      tenant?: string;
      /** The principal the request resolved to, when `principal` is in scope. */
      principal?: string;
      /** The client's key as the engine saw it (an sf-string's content, without quotes). */
      key: string;
      /**
       * The scope the record was claimed with.
       * @default the module-wide `scope` (for `IdempotencyService.run()` callers: the dimensions they passed)
       */
      scope?: readonly ScopeDimension[];
    }
  | {
      /** The storage id (32 hex characters), e.g. from `listInProgress`. */
      keyId: string;
    };

/**
 * A record as an operator sees it: never the raw key, and the body only when asked for.
 *
 * @publicApi
 */
export interface IdempotencyRecordView {
  state: IdempotencyRecordState;
  /** Token of the claim that owns the record. */
  ownerToken: string;
  /** 1 for the first claim, +1 per takeover. */
  fencingToken: number;
  /** Request fingerprint (base64url SHA-256). */
  fingerprint: string;
  createdAt: string;
  createdAtMs: number;
  leaseExpiresAt: string;
  leaseExpiresAtMs: number;
  expiresAt: string;
  expiresAtMs: number;
  /** Age by the store's clock when it was read, in ms. */
  ageMs: number;
  /** True while `in_progress` with a lapsed lease: its owner stopped renewing (crashed or frozen). */
  leaseLapsed: boolean;
  /** The stored response, when `completed`. */
  response?: {
    statusCode: number;
    headers: Record<string, string | string[]>;
    /** Size of the stored body in bytes (0 without a body). */
    bodyBytes: number;
    bodyOmitted: boolean;
    /** The body, base64, only with `includeBody: true`. */
    bodyBase64?: string;
  };
}

/**
 * What one tier says about a record.
 *
 * @publicApi
 */
export type IdempotencyTierView =
  | { status: 'found'; record: IdempotencyRecordView }
  | { status: 'absent' }
  | { status: 'unavailable'; error: string }
  | { status: 'not-configured' };

/**
 * Result of `IdempotencyAdmin.lookup`.
 *
 * @publicApi
 */
export interface IdempotencyLookupResult {
  /** The storage id (a hash of the scoped key: safe to log). */
  keyId: string;
  fast: IdempotencyTierView;
  durable: IdempotencyTierView;
}

/**
 * One tier's in-progress records, for `IdempotencyAdmin.listInProgress`.
 *
 * @publicApi
 */
export type IdempotencyTierListing =
  | { status: 'listed'; records: Array<{ keyId: string; record: IdempotencyRecordView }> }
  | { status: 'unavailable'; error: string }
  | { status: 'not-configured' };

/**
 * Result of `IdempotencyAdmin.listInProgress`.
 *
 * @publicApi
 */
export interface IdempotencyInProgressListing {
  fast: IdempotencyTierListing;
  durable: IdempotencyTierListing;
}

/**
 * Who force-releases a record and why: both go into the audit log.
 *
 * @publicApi
 */
export interface IdempotencyForceReleaseRequest {
  /** Who asks (an operator's name or id). 1–200 characters. */
  actor: string;
  /** Why (a ticket, an incident). 1–500 characters. */
  reason: string;
  /**
   * Also delete a `completed` record. Its response then stops answering retries, and a retry
   * runs the handler again: only for a record known to be wrong.
   * @default false
   */
  includeCompleted?: boolean;
}

/**
 * What force-release did in one tier.
 *
 * @publicApi
 */
export type IdempotencyTierRelease = 'released' | 'not-found' | 'not-configured' | { error: string };

/**
 * Result of `IdempotencyAdmin.forceRelease`.
 *
 * @publicApi
 */
export interface IdempotencyForceReleaseResult {
  keyId: string;
  fast: IdempotencyTierRelease;
  durable: IdempotencyTierRelease;
}
