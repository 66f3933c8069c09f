import fc from 'fast-check';
import { IdempotencyService, type IdempotencyPolicyOptions, type IdempotencyStore } from 'nestjs-idempotency';
import { decideOutcome } from '../../src/engine/outcome-policy.js';
import { resolvePolicy, type ResolvedPolicy } from '../../src/idempotency.options.js';
import type { IdempotencyClaim } from '../../src/engine/idempotency-claim.js';
import type { BeginResult } from '../../src/engine/idempotency-engine.types.js';
import { buildScopedKey } from '../../src/engine/scoped-key.js';
import { resolveModuleSettings } from '../../src/idempotency.options.js';

/**
 * A pure reference model of one record's state machine (docs/contract.md B.5, B.7, B.9), and fast-check
 * commands that drive the real engine (`begin`, `finish`, `abandon`) and the model side by side,
 * comparing every observable answer.
 *
 * Claims are the model's handlers: `alive` ones renew their lease (the engine's heartbeat runs),
 * `crashed` ones stopped renewing (a frozen or dead process), and `Elapse` lets a lease lapse.
 */

/** What the model knows of one claim the test holds. */
interface ModelClaim {
  key: number;
  crashed: boolean;
  /** The lease lapsed after the crash (an `Elapse` ran since). */
  leaseDead: boolean;
}

type ModelRecord =
  | { state: 'in_progress'; fingerprint: number; owner: number }
  | { state: 'completed'; fingerprint: number; statusCode: number; body?: string };

export interface Model {
  records: Map<number, ModelRecord>;
  claims: ModelClaim[];
}

export interface Real {
  service: IdempotencyService;
  policy: ResolvedPolicy;
  /** Distinguishes the runs that share a store. */
  operation: string;
  claims: IdempotencyClaim[];
  /** Lets more than a lease of store time pass; alive claims keep renewing meanwhile. */
  elapse(): Promise<void>;
  /** Which answers the runs have seen (`claimed`, `takeover`, `replay`, `lost`, ...): the mix must reach every state. */
  seen: Set<string>;
}

/** The outcome of `begin` as the model predicts it, in the engine's words. */
type Expected = BeginResult['kind'];

const KEYS = 2;
/** Statuses a handler answers; the outcome policy stores some and releases the others (B.7). */
const STATUSES = [200, 201, 404, 409, 422, 429, 500, 503];
/** Bodies larger than `maxStoredResponseBytes` are stored as omitted (B.8 rule 23). */
export const MAX_STORED_BYTES = 16;

/** An engine over `store` with a policy for the model: reject duplicates, take over dead leases. */
export function modelEngine(
  store: IdempotencyStore,
  options: IdempotencyPolicyOptions,
): { service: IdempotencyService; policy: ResolvedPolicy } {
  const moduleOptions = { ...options, maxStoredResponseBytes: MAX_STORED_BYTES, staleLock: 'takeover' as const };
  const service = new IdempotencyService(store, resolveModuleSettings(moduleOptions), null);
  return { service, policy: resolvePolicy(moduleOptions) };
}

const scopedOf = (real: Real, key: number) =>
  buildScopedKey({ operation: real.operation, key: `key-${key}` }, ['operation']);
const fingerprintOf = (fingerprint: number) => `fingerprint-${fingerprint}`;

function leaseLive(model: Model, owner: number): boolean {
  return !model.claims[owner].leaseDead;
}

class Begin implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly key: number,
    readonly fingerprint: number,
  ) {}
  check = () => true;

  async run(model: Model, real: Real): Promise<void> {
    const record = model.records.get(this.key);
    let expected: Expected;
    if (!record) expected = 'claimed';
    else if (record.fingerprint !== this.fingerprint) expected = 'mismatch';
    else if (record.state === 'completed') expected = record.body === undefined ? 'replay-unavailable' : 'replay';
    else expected = leaseLive(model, record.owner) ? 'in-progress' : 'claimed';

    const result = await real.service.begin({
      scoped: scopedOf(real, this.key),
      fingerprint: fingerprintOf(this.fingerprint),
      policy: real.policy,
    });
    expect(result.kind).toBe(expected);
    real.seen.add(result.kind === 'claimed' && record ? 'takeover' : result.kind);

    if (result.kind === 'claimed') {
      // The key property: a claim is only granted when no live handler holds the record.
      expect(result.claim.tookOver).toBe(record !== undefined);
      model.records.set(this.key, { state: 'in_progress', fingerprint: this.fingerprint, owner: model.claims.length });
      model.claims.push({ key: this.key, crashed: false, leaseDead: false });
      real.claims.push(result.claim);
    }
    if (result.kind === 'replay' && record?.state === 'completed') {
      // A replay always returns the stored outcome.
      expect(result.response.statusCode).toBe(record.statusCode);
      expect(result.response.body?.toString('utf8')).toBe(record.body);
    }
  }
  toString = () => `Begin(key ${this.key}, fingerprint ${this.fingerprint})`;
}

class Finish implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly claimPick: number,
    readonly statusCode: number,
    readonly bodyBytes: number,
  ) {}
  check = (model: Readonly<Model>) => model.claims.length > 0;

  async run(model: Model, real: Real): Promise<void> {
    const index = this.claimPick % model.claims.length;
    const claim = model.claims[index];
    const record = model.records.get(claim.key);
    const owns = record?.state === 'in_progress' && record.owner === index;
    const body = 'b'.repeat(this.bodyBytes);
    const outcome = decideOutcome(this.statusCode, real.policy, undefined);

    const result = await real.service.finish(real.claims[index], {
      statusCode: this.statusCode,
      headers: {},
      body: Buffer.from(body),
    });
    expect(result).toBe(owns ? (outcome === 'store' ? 'stored' : 'released') : 'lost');
    real.seen.add(result);

    if (!owns) return;
    if (outcome === 'release') model.records.delete(claim.key);
    else {
      model.records.set(claim.key, {
        state: 'completed',
        fingerprint: record.fingerprint,
        statusCode: this.statusCode,
        ...(this.bodyBytes <= MAX_STORED_BYTES && { body }),
      });
    }
  }
  toString = () => `Finish(claim ${this.claimPick}, ${this.statusCode}, ${this.bodyBytes} bytes)`;
}

class Abandon implements fc.AsyncCommand<Model, Real> {
  constructor(readonly claimPick: number) {}
  check = (model: Readonly<Model>) => model.claims.length > 0;

  async run(model: Model, real: Real): Promise<void> {
    const index = this.claimPick % model.claims.length;
    const record = model.records.get(model.claims[index].key);
    const owns = record?.state === 'in_progress' && record.owner === index;
    expect(await real.service.abandon(real.claims[index])).toBe(owns ? 'released' : 'lost');
    if (owns) model.records.delete(model.claims[index].key);
  }
  toString = () => `Abandon(claim ${this.claimPick})`;
}

/** The process that holds the claim freezes: its heartbeat stops, its handler has not finished. */
class Crash implements fc.AsyncCommand<Model, Real> {
  constructor(readonly claimPick: number) {}
  check = (model: Readonly<Model>) => model.claims.length > 0;

  async run(model: Model, real: Real): Promise<void> {
    const index = this.claimPick % model.claims.length;
    model.claims[index].crashed = true;
    real.claims[index].stopHeartbeat();
  }
  toString = () => `Crash(claim ${this.claimPick})`;
}

/** More than a lease passes: every crashed claim's lease lapses; alive claims renewed theirs. */
class Elapse implements fc.AsyncCommand<Model, Real> {
  check = () => true;

  async run(model: Model, real: Real): Promise<void> {
    await real.elapse();
    for (const claim of model.claims) if (claim.crashed) claim.leaseDead = true;
  }
  toString = () => 'Elapse';
}

/** The command mix. A claim that finished or was fenced is still picked: its calls must be refused. */
export function engineCommands(): Array<fc.Arbitrary<fc.AsyncCommand<Model, Real>>> {
  const claimPick = fc.nat({ max: 15 });
  return [
    // Retries mostly repeat the payload; a different one (a mismatch) now and then.
    fc
      .tuple(fc.nat({ max: KEYS - 1 }), fc.constantFrom(0, 0, 0, 1))
      .map(([key, fingerprint]) => new Begin(key, fingerprint)),
    fc
      .tuple(fc.nat({ max: KEYS - 1 }), fc.constantFrom(0, 0, 0, 1))
      .map(([key, fingerprint]) => new Begin(key, fingerprint)),
    fc
      .tuple(claimPick, fc.constantFrom(...STATUSES), fc.constantFrom(0, 8, MAX_STORED_BYTES + 1))
      .map(([pick, status, bytes]) => new Finish(pick, status, bytes)),
    claimPick.map((pick) => new Abandon(pick)),
    claimPick.map((pick) => new Crash(pick)),
    fc.constant(new Elapse()),
  ];
}

export function emptyModel(): Model {
  return { records: new Map(), claims: [] };
}
