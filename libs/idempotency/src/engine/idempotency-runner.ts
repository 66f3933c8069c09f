/**
 * `IdempotencyService.run()`: a function run once per key through the adapter protocol
 * (`begin`, then `execute`), its value stored as JSON and every other verdict mapped to a
 * `RunResult` or an `IdempotencyRunError`.
 */
import { createHash } from 'node:crypto';
import { runWithContext } from '../context/idempotency-request-context.js';
import { forcedOutcomeOf } from '../errors/idempotency-outcome.exceptions.js';
import { IdempotencyRunError } from '../errors/idempotency-run.error.js';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import { resolvePolicy, type ResolvedModuleSettings } from '../idempotency.options.js';
import type { IdempotencyTelemetry } from '../telemetry/idempotency-telemetry.js';
import type { IdempotencyClaim } from './idempotency-claim.js';
import { IdempotencyContextRef } from './idempotency-context.js';
import type {
  BeginRequest,
  BeginResult,
  Execution,
  ExecutionResult,
  HandlerOutcome,
  RunRequest,
  RunResult,
} from './idempotency-engine.types.js';
import { decideOutcome, type OutcomeOverride } from './outcome-policy.js';
import { decodeRunBody, encodeRunFailure, encodeRunValue, unencodableRunValue } from './run-codec.js';
import { buildScopedKey, type ScopeDimension } from './scoped-key.js';

/** The adapter protocol `run()` drives, as `IdempotencyService` implements it. */
export interface RunProtocol {
  begin(request: BeginRequest): Promise<BeginResult>;
  execute(claim: IdempotencyClaim, execution: Execution): Promise<ExecutionResult>;
}

export class IdempotencyRunner {
  constructor(
    private readonly engine: RunProtocol,
    private readonly settings: ResolvedModuleSettings,
    private readonly telemetry: IdempotencyTelemetry,
  ) {}

  run<T>(request: RunRequest, fn: (context: IdempotencyContextRef) => Promise<T> | T): Promise<RunResult<T>> {
    return this.telemetry.observeRun(request, () => this.runOnce(request, fn));
  }

  /**
   * What the outcome policy makes of `error`, thrown by the function of `run(request, fn)`: the
   * same decision `runClaimed()` has the engine apply (the status `error` is stored under, then
   * what the function or the error forced).
   */
  failureOutcome(request: RunRequest, error: unknown, context?: IdempotencyContextRef): OutcomeOverride {
    const policy = resolvePolicy(this.settings.policyOptions, request.options);
    return decideOutcome(encodeRunFailure(error).statusCode, policy, context?.outcome ?? forcedOutcomeOf(error));
  }

  private async runOnce<T>(
    request: RunRequest,
    fn: (context: IdempotencyContextRef) => Promise<T> | T,
  ): Promise<RunResult<T>> {
    const policy = resolvePolicy(this.settings.policyOptions, request.options);
    const scope: ScopeDimension[] = ['operation'];
    if (request.tenant !== undefined) scope.push('tenant');
    if (request.principal !== undefined) scope.push('principal');
    const scoped = buildScopedKey(
      { operation: request.operation, tenant: request.tenant, principal: request.principal, key: request.key },
      scope,
    );
    const fingerprint = createHash('sha256')
      .update(request.fingerprint ?? '')
      .digest('base64url');
    const begun = await this.engine.begin({
      scoped,
      fingerprint,
      policy,
      labels: { operation: request.operation, tenant: request.tenant },
    });
    switch (begun.kind) {
      case 'claimed':
        return this.runClaimed(begun.claim, fn);
      case 'replay': {
        const { response } = begun;
        if (response.statusCode >= 200 && response.statusCode < 300) {
          return { status: 'replayed', value: decodeRunBody(response) as T };
        }
        throw new IdempotencyRunError(
          'replayed-failure',
          `An earlier run with this key failed with ${response.statusCode}; the failure is stored.`,
          {
            status: response.statusCode,
            body: decodeRunBody(response),
          },
        );
      }
      case 'mismatch':
        throw new IdempotencyRunError('key-reused', 'This key was already used with a different fingerprint.');
      case 'in-progress':
        throw new IdempotencyRunError('in-progress', 'A run with this key is still in progress.', {
          retryAfterSeconds: begun.retryAfterSeconds,
        });
      case 'replay-unavailable':
        throw new IdempotencyRunError(
          'replay-unavailable',
          'A run with this key completed, but its result was not stored.',
        );
      case 'outcome-unknown':
        throw new IdempotencyRunError(
          'outcome-unknown',
          'A run with this key stopped before it finished; its outcome is unknown.',
        );
    }
  }

  private async runClaimed<T>(
    claim: IdempotencyClaim,
    fn: (context: IdempotencyContextRef) => Promise<T> | T,
  ): Promise<RunResult<T>> {
    const context = new IdempotencyContextRef(claim);
    let outcome: HandlerOutcome | undefined;
    let unencodable: unknown;
    const result = await this.engine.execute(claim, {
      run: async (manager) => {
        context.attachManager(manager);
        try {
          outcome = { ok: true, value: await runWithContext(context, () => fn(context)) };
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
      throw new IdempotencyStoreError(
        'The transaction of this run could not be started or committed; retry later.',
        'durable',
      );
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
}
