import { createHash, randomBytes } from 'node:crypto';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type { ClaimRequest, ClaimResult } from '../stores/idempotency-store.js';
import { expect } from './contract-expect.js';

/**
 * What both store contract suites write and wait with: ids, tokens and fingerprints shaped like
 * the engine's, claim requests, an awkward response, and a plain pause (real timers only).
 */

/** Long enough to outlive any test. */
export const LONG_MS = 60_000;

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A random storage id shaped like the engine's (32 hex characters). @publicApi */
export const newId = (): string => randomBytes(16).toString('hex');
/** A random owner token shaped like the engine's (22 base64url characters). @publicApi */
export const newToken = (): string => randomBytes(16).toString('base64url');
/** A random fingerprint shaped like the engine's (base64url SHA-256, 43 characters). @publicApi */
export const newFingerprint = (): string => createHash('sha256').update(randomBytes(16)).digest('base64url');

/** A `ClaimRequest` with fresh token and fingerprint and 60 s lease and lifetime, `overrides` applied. @publicApi */
export function claimRequest(overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return { ownerToken: newToken(), fingerprint: newFingerprint(), leaseMs: LONG_MS, ttlMs: LONG_MS, ...overrides };
}

/** Bytes that are not valid UTF-8 (lone continuation bytes, an overlong form, a surrogate, NUL, CR LF). @publicApi */
export const NON_UTF8_BODY = Buffer.from([
  0x00, 0xff, 0xfe, 0x80, 0xbf, 0xc0, 0xaf, 0xed, 0xa0, 0x80, 0x0d, 0x0a, 0x7f,
]);

/** A response with awkward headers (multi-valued, empty, non-ASCII) and a non-UTF-8 body, `overrides` applied. @publicApi */
export function sampleResponse(overrides: Partial<StoredResponse> = {}): StoredResponse {
  return {
    statusCode: 201,
    headers: {
      'content-type': 'application/octet-stream',
      location: '/orders/8f14e45f-ceea-467f-a0e6-2f1a3b9c0d11',
      link: ['</a>; rel="a"', '</b, c>; rel="b"'],
      'x-empty': [],
      'content-disposition': 'attachment; filename="reçu ✓.pdf"',
    },
    body: Buffer.from(NON_UTF8_BODY),
    ...overrides,
  };
}

/** What both store contracts need of a store to stage a record: the fast and the durable tier alike. */
interface StagingStore {
  claim(key: string, request: ClaimRequest): Promise<ClaimResult>;
  complete(key: string, ownerToken: string, response: StoredResponse): Promise<boolean>;
  get(key: string): Promise<IdempotencyRecord | undefined>;
}

/** Claims `key` afresh, failing the case if it was not free. */
export async function claimedIn(
  store: StagingStore,
  key: string,
  overrides: Partial<ClaimRequest> = {},
): Promise<IdempotencyRecord> {
  const result = await store.claim(key, claimRequest(overrides));
  if (result.kind !== 'claimed') throw new Error(`expected a claim of ${key}, got ${result.kind}`);
  return result.record;
}

/** Claims and completes `key` with `response`, and returns the record as stored. */
export async function completedIn(
  store: StagingStore,
  key: string,
  response: StoredResponse,
): Promise<IdempotencyRecord> {
  const record = await claimedIn(store, key);
  expect(await store.complete(key, record.ownerToken, response)).toBe(true);
  const stored = await store.get(key);
  if (!stored) throw new Error(`record ${key} vanished after complete`);
  return stored;
}
