import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { parseIdempotencyKey, type ParsedKey } from '../http/idempotency-key.parser.js';
import { buildScopedKey } from '../engine/scoped-key.js';
import { IDEMPOTENCY_SETTINGS } from '../idempotency.tokens.js';
import { resolvePolicy, type ResolvedModuleSettings } from '../idempotency.options.js';
import type { IdempotencyRecord } from '../interfaces/idempotency-record.interface.js';
import { DurableIdempotencyStore } from '../stores/durable-idempotency-store.js';
import { IdempotencyStore } from '../stores/idempotency-store.js';
import type {
  IdempotencyForceReleaseRequest,
  IdempotencyForceReleaseResult,
  IdempotencyInProgressListing,
  IdempotencyLookupResult,
  IdempotencyRecordRef,
  IdempotencyRecordView,
  IdempotencyTierListing,
  IdempotencyTierRelease,
  IdempotencyTierView,
} from './idempotency-admin.types.js';

const KEY_ID = /^[0-9a-f]{32}$/;
const MAX_ACTOR_LENGTH = 200;
const MAX_REASON_LENGTH = 500;
const DEFAULT_LIST_LIMIT = 100;

/**
 * Inspection and repair of idempotency records (DESIGN "Operations"), for an operator's tools:
 * look a record up in both tiers, list the in-progress records that have been running too long,
 * and force-release a stuck one. Provided and exported by `IdempotencyModule`; the library adds
 * no route for it: expose it behind your own authentication (the sample service's
 * `/admin/idempotency` shows one way).
 *
 * Nothing here takes or returns a body unless asked, and nothing is logged with a raw key: the
 * audit log line of `forceRelease` (context `IdempotencyAdmin`) names the storage id.
 *
 * @example
 * const { fast, durable } = await admin.lookup({ operation: 'POST /orders', tenant, key });
 * await admin.forceRelease({ keyId }, { actor: 'alice', reason: 'INC-1234: worker froze' });
 * @publicApi
 */
@Injectable()
export class IdempotencyAdmin {
  private readonly logger = new Logger('IdempotencyAdmin');

  constructor(
    private readonly store: IdempotencyStore,
    @Inject(IDEMPOTENCY_SETTINGS) private readonly settings: ResolvedModuleSettings,
    @Optional() @Inject(DurableIdempotencyStore) private readonly durableStore?: DurableIdempotencyStore | null,
  ) {}

  /**
   * Reads an `Idempotency-Key` field value as a client sent it (`"8e03…"` or a bare token) with
   * the module-wide key rules, so an operator can paste it: the `key` of an
   * {@link IdempotencyRecordRef} is the `key` of a `valid` result.
   */
  parseKeyField(value: string): ParsedKey {
    return parseIdempotencyKey(value, resolvePolicy(this.settings.policyOptions));
  }

  /**
   * The storage id of a record: computed from its scope parts as the engine does, or checked.
   * @throws IdempotencyScopeError when a dimension of the scope has no value; RangeError for a malformed `keyId`.
   */
  keyIdOf(ref: IdempotencyRecordRef): string {
    if ('keyId' in ref) {
      if (typeof ref.keyId !== 'string' || !KEY_ID.test(ref.keyId)) {
        throw new RangeError('keyId must be a storage id: 32 lower-case hex characters');
      }
      return ref.keyId;
    }
    const scope = ref.scope ?? resolvePolicy(this.settings.policyOptions).scope;
    return buildScopedKey(
      { operation: ref.operation, tenant: ref.tenant, principal: ref.principal, key: ref.key },
      scope,
    ).id;
  }

  /** What each tier holds for the record. A tier that fails is reported, not thrown. */
  async lookup(ref: IdempotencyRecordRef, options: { includeBody?: boolean } = {}): Promise<IdempotencyLookupResult> {
    const keyId = this.keyIdOf(ref);
    const includeBody = options.includeBody === true;
    const [fast, durable] = await Promise.all([
      tierView(this.store, keyId, includeBody),
      this.durableStore ? tierView(this.durableStore, keyId, includeBody) : notConfigured(),
    ]);
    return { keyId, fast, durable };
  }

  /**
   * In-progress records at least `olderThanMs` old in each tier, oldest first, at most `limit`
   * per tier (1–1000, default 100). A healthy service has none older than a few leases.
   */
  async listInProgress(options: { olderThanMs: number; limit?: number }): Promise<IdempotencyInProgressListing> {
    const { olderThanMs } = options;
    const limit = options.limit ?? DEFAULT_LIST_LIMIT;
    const [fast, durable] = await Promise.all([
      tierListing(this.store, olderThanMs, limit),
      this.durableStore ? tierListing(this.durableStore, olderThanMs, limit) : notConfigured(),
    ]);
    return { fast, durable };
  }

  /**
   * Deletes the record in both tiers whoever owns it, so the next request with the key runs
   * afresh; an owner still running is fenced (its completion is refused and logged as lost).
   * A `completed` record is kept unless `includeCompleted`. Writes one audit log line (warn,
   * context `IdempotencyAdmin`) with actor, reason, storage id and the outcome per tier.
   * @throws TypeError / RangeError for a missing actor or reason, and as `keyIdOf`.
   */
  async forceRelease(
    ref: IdempotencyRecordRef,
    request: IdempotencyForceReleaseRequest,
  ): Promise<IdempotencyForceReleaseResult> {
    const actor = checkText('actor', request.actor, MAX_ACTOR_LENGTH);
    const reason = checkText('reason', request.reason, MAX_REASON_LENGTH);
    const keyId = this.keyIdOf(ref);
    const scope = request.includeCompleted === true ? 'any' : 'in-progress';
    // Durable first: it is the authority, and a new request that finds the fast tier empty
    // must not meet the old durable row.
    const durable = this.durableStore ? await tierRelease(this.durableStore, keyId, scope) : 'not-configured';
    const fast = await tierRelease(this.store, keyId, scope);
    const operation = 'operation' in ref ? ` operation=${JSON.stringify(ref.operation)}` : '';
    this.logger.warn(
      `force-release key=${keyId}${operation} actor=${JSON.stringify(actor)} reason=${JSON.stringify(reason)} ` +
        `scope=${scope} fast=${describeRelease(fast)} durable=${describeRelease(durable)}`,
    );
    return { keyId, fast, durable };
  }
}

type Tier = Pick<IdempotencyStore, 'get' | 'listInProgress' | 'forceDelete'>;

async function notConfigured(): Promise<{ status: 'not-configured' }> {
  return { status: 'not-configured' };
}

async function tierView(store: Tier, keyId: string, includeBody: boolean): Promise<IdempotencyTierView> {
  try {
    const record = await store.get(keyId);
    return record ? { status: 'found', record: viewOf(record, Date.now(), includeBody) } : { status: 'absent' };
  } catch (error) {
    return { status: 'unavailable', error: messageOf(error) };
  }
}

async function tierListing(store: Tier, olderThanMs: number, limit: number): Promise<IdempotencyTierListing> {
  let entries;
  try {
    entries = await store.listInProgress(olderThanMs, limit);
  } catch (error) {
    if (error instanceof RangeError) throw error;
    return { status: 'unavailable', error: messageOf(error) };
  }
  return {
    status: 'listed',
    records: entries.map((entry) => ({ keyId: entry.key, record: viewOf(entry.record, entry.nowMs, false) })),
  };
}

async function tierRelease(store: Tier, keyId: string, scope: 'in-progress' | 'any'): Promise<IdempotencyTierRelease> {
  try {
    return (await store.forceDelete(keyId, scope)) ? 'released' : 'not-found';
  } catch (error) {
    return { error: messageOf(error) };
  }
}

function viewOf(record: IdempotencyRecord, nowMs: number, includeBody: boolean): IdempotencyRecordView {
  const view: IdempotencyRecordView = {
    state: record.state,
    ownerToken: record.ownerToken,
    fencingToken: record.fencingToken,
    fingerprint: record.fingerprint,
    createdAt: new Date(record.createdAtMs).toISOString(),
    createdAtMs: record.createdAtMs,
    leaseExpiresAt: new Date(record.leaseExpiresAtMs).toISOString(),
    leaseExpiresAtMs: record.leaseExpiresAtMs,
    expiresAt: new Date(record.expiresAtMs).toISOString(),
    expiresAtMs: record.expiresAtMs,
    ageMs: Math.max(0, nowMs - record.createdAtMs),
    leaseLapsed: record.state === 'in_progress' && record.leaseExpiresAtMs <= nowMs,
  };
  const response = record.response;
  if (response) {
    view.response = {
      statusCode: response.statusCode,
      headers: response.headers,
      bodyBytes: response.body?.length ?? 0,
      bodyOmitted: response.bodyOmitted === true,
      ...(includeBody && response.body !== undefined && { bodyBase64: response.body.toString('base64') }),
    };
  }
  return view;
}

function checkText(name: string, value: unknown, maxLength: number): string {
  if (typeof value !== 'string' || value.trim().length === 0) {
    throw new TypeError(`${name} must be a non-empty string: the audit log records it`);
  }
  if (value.length > maxLength) throw new RangeError(`${name} must be at most ${maxLength} characters`);
  return value.trim();
}

function describeRelease(outcome: IdempotencyTierRelease): string {
  return typeof outcome === 'string' ? outcome : 'error';
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
