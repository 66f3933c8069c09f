/**
 * What a store keeps of a response, and how it is read back: oversized bodies dropped, bodies
 * sealed and opened with the module's cipher when `encryption` is configured.
 */
import { IdempotencyRecordUnreadableError } from '../errors/idempotency-record-unreadable.error.js';
import type { ResolvedPolicy } from '../idempotency.options.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import { isSealedBody, type IdempotencyCipher } from '../security/idempotency-cipher.js';
import type { IdempotencyTelemetry } from '../telemetry/idempotency-telemetry.js';

export class StoredResponseSealer {
  constructor(
    private readonly cipher: IdempotencyCipher | undefined,
    private readonly telemetry: IdempotencyTelemetry,
  ) {}

  /** What a store keeps of `response`: without an oversized body (B.8 rule 23), sealed when encryption is on. */
  storable(id: string, policy: ResolvedPolicy, response: StoredResponse): StoredResponse {
    const kept =
      response.body && response.body.length > policy.maxStoredResponseBytes
        ? { statusCode: response.statusCode, headers: response.headers, bodyOmitted: true }
        : response;
    return this.seal(id, kept);
  }

  seal(id: string, response: StoredResponse): StoredResponse {
    return this.cipher ? this.cipher.seal(id, response) : response;
  }

  /** The stored response in clear, or IdempotencyRecordUnreadableError: never replay what does not open. */
  open(id: string, stored: StoredResponse): StoredResponse {
    try {
      if (this.cipher) return this.cipher.open(id, stored);
      if (isSealedBody(stored.body)) {
        throw new IdempotencyRecordUnreadableError(
          'the stored response is encrypted, but no `encryption` is configured',
          'no-cipher',
        );
      }
      return stored;
    } catch (error) {
      if (error instanceof IdempotencyRecordUnreadableError) this.telemetry.unreadableRecord(id, error.message);
      throw error;
    }
  }
}
