/**
 * The record one scoped key owns in a store. Timestamps are epoch milliseconds of the store's
 * own clock (Redis `TIME` for the Redis store), so leases do not depend on the pods' clocks.
 *
 * @publicApi
 */
export type IdempotencyRecordState = 'in_progress' | 'completed';

/**
 * A response captured from a handler, as it is replayed.
 *
 * @publicApi
 */
export interface StoredResponse {
  /** HTTP status code (or, for non-HTTP callers, 200 for success). */
  statusCode: number;
  /** Replayable headers, names lower-cased (the denylist of docs/contract.md B.8 is already applied). */
  headers: Record<string, string | string[]>;
  /** The body bytes as sent, before content-encoding. Absent when `bodyOmitted` is true. */
  body?: Buffer;
  /** True when the body was too large or streamed: the record completes without it. */
  bodyOmitted?: boolean;
}

/**
 * @publicApi
 */
export interface IdempotencyRecord {
  state: IdempotencyRecordState;
  /** Request fingerprint (base64url SHA-256) the record was claimed with. */
  fingerprint: string;
  /** Random token of the claim that owns the record; every write is guarded by it (fencing). */
  ownerToken: string;
  /** Monotonic counter: 1 for the first claim, +1 on every takeover of the same record. */
  fencingToken: number;
  /** When the record was first claimed. */
  createdAtMs: number;
  /** While `in_progress`: when the owner's lease lapses unless extended. */
  leaseExpiresAtMs: number;
  /** When the record stops existing for readers (docs/contract.md B.10: expiry is enforced on read). */
  expiresAtMs: number;
  /** The captured response, only when `completed`. */
  response?: StoredResponse;
}
