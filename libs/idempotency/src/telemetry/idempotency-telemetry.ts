import { Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { metrics, type Attributes, type MeterProvider, type Span } from '@opentelemetry/api';
import type { IdempotencyClaim } from '../engine/idempotency-claim.js';
import type {
  BeginRequest,
  BeginResult,
  Execution,
  FinishResult,
  HandlerOutcome,
  RunRequest,
  TelemetryLabels,
} from '../engine/idempotency-engine.types.js';
import type { ScopedKey } from '../engine/scoped-key.js';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import { IDEMPOTENCY_SPAN_ATTRIBUTES as ATTR, IDEMPOTENCY_SPANS } from './idempotency-telemetry.constants.js';
import { activeTracer, finishSpan, settledCall, UNTRACED_SPAN } from './phase-spans.js';
import { addHeldClaimsSource, observeHeldClaims, type HeldClaims } from './held-claims-gauges.js';
import { publishDiagnostics, type IdempotencyDiagnosticsEvent } from './idempotency-diagnostics.js';
import { createInstruments, isNoopMeterProvider, type Instruments } from './idempotency-instruments.js';
import { instrumentStore, type StoreCallObservation, type StoreTier } from './instrumented-store.js';
import { formatLogLine, type LogFieldValue } from './log-line.js';

const UNKNOWN_OPERATION = 'unknown';

/**
 * The library's metrics, spans and structured logs, through `@opentelemetry/api` only: a no-op
 * until the application registers an OpenTelemetry SDK, and live as soon as it does (the meter
 * is looked up again whenever the global provider changes, since the metrics API has no proxy).
 * Spans are children of the active context, so they nest under the request's span when the app
 * has HTTP instrumentation. Nothing recorded here carries a raw key: logs and spans get the
 * scoped key's id (a hash), metrics only the operation, tier and outcome.
 */
@Injectable()
export class IdempotencyTelemetry implements OnApplicationBootstrap {
  private readonly logger = new Logger('Idempotency');
  private readonly labels = new WeakMap<ScopedKey, TelemetryLabels>();
  private readonly lostClaims = new WeakSet<IdempotencyClaim>();
  private current?: { provider: MeterProvider; instruments: Instruments; metered: boolean };

  /**
   * Adds an engine's live claims to the process's claim gauges, observed only when the SDK
   * collects (nothing per request); the returned function takes them out at shutdown.
   */
  watchHeldClaims(source: () => HeldClaims): () => void {
    return addHeldClaimsSource(source);
  }

  /** The SDK is registered by now (an app's `onModuleInit`): the gauges exist before any request. */
  onApplicationBootstrap(): void {
    this.instruments();
  }

  /** Wraps a store so that each call is timed, its failures counted, and traced as a child span. */
  instrumentStore<S extends object>(store: S, tier: StoreTier): S {
    return instrumentStore(store, tier, (observation, call) => this.observeStoreCall(observation, call));
  }

  /** The claim phase: a span around `begin`, and its verdict counted (claims, replays, conflicts, takeovers). */
  async observeBegin(request: BeginRequest, begin: () => Promise<BeginResult>): Promise<BeginResult> {
    const { scoped, policy } = request;
    this.labels.set(scoped, {
      operation: request.labels?.operation ?? policy.operation ?? UNKNOWN_OPERATION,
      tenant: request.labels?.tenant,
    });
    const tier: StoreTier = policy.durable ? 'durable' : 'fast';
    // Untraced: no span, and no wrapper around the claim beyond the verdict's own.
    const result = activeTracer()
      ? await this.inSpan(IDEMPOTENCY_SPANS.claim, scoped, (span) => this.verdictOf(scoped, begin, span))
      : await this.verdictOf(scoped, begin);
    this.countVerdict(scoped, tier, result);
    return result;
  }

  private async verdictOf(scoped: ScopedKey, begin: () => Promise<BeginResult>, span?: Span): Promise<BeginResult> {
    try {
      const verdict = await begin();
      span?.setAttribute(ATTR.outcome, verdict.kind);
      if (verdict.kind === 'claimed') span?.setAttribute(ATTR.fencingToken, verdict.claim.fencingToken);
      return verdict;
    } catch (error) {
      if (error instanceof IdempotencyStoreError)
        this.storeError(scoped, { phase: 'claim', outcome: 'claim_failed', error });
      throw error;
    }
  }

  /**
   * A whole `run()` (a message, a job, a webhook) in one span, so that its phases share a trace
   * even where no request span exists (a queue worker). The span says how the run ended.
   */
  observeRun<T extends { status: string }>(request: RunRequest, run: () => Promise<T>): Promise<T> {
    const tracer = activeTracer();
    if (!tracer) return run();
    const attributes: Attributes = { [ATTR.operation]: request.operation };
    if (request.tenant !== undefined) attributes[ATTR.tenant] = request.tenant;
    return tracer.startActiveSpan(IDEMPOTENCY_SPANS.run, { attributes }, (span) =>
      finishSpan(
        span,
        run().then((result) => {
          span.setAttribute(ATTR.outcome, result.status);
          return result;
        }),
      ),
    );
  }

  /** The handler phase: the adapter's `run` inside a span (the handler's own spans nest in it), timed. */
  observeExecution(claim: IdempotencyClaim, execution: Execution): Execution {
    // Nothing to time or trace: the execution as it is (no wrapper, no closures per request).
    if (!activeTracer() && !this.metered()) return execution;
    return {
      run: (manager) =>
        this.inSpan(IDEMPOTENCY_SPANS.handler, claim.scoped, async (span) => {
          const startedAt = performance.now();
          const outcome: HandlerOutcome = await execution.run(manager);
          const result = outcome.ok ? 'ok' : 'error';
          span.setAttribute(ATTR.outcome, result);
          this.instruments().handlerDuration.record((performance.now() - startedAt) / 1000, {
            operation: this.labelsOf(claim.scoped).operation,
            outcome: result,
          });
          return outcome;
        }),
      response: (outcome) => execution.response(outcome),
      override: (outcome) => execution.override(outcome),
    };
  }

  /** The complete or release phase of a claim, in a span; a release that freed the key is counted. */
  observeFinish(
    phase: 'complete' | 'release',
    claim: IdempotencyClaim,
    finish: () => Promise<FinishResult>,
  ): Promise<FinishResult> {
    if (!activeTracer()) {
      // Untraced: only a release that freed the key is worth a look, after the fact.
      return settledCall(finish).then((result) => {
        if (result === 'released') this.released(claim);
        return result;
      });
    }
    return this.inSpan(IDEMPOTENCY_SPANS[phase], claim.scoped, async (span) => {
      const result = await finish();
      span.setAttribute(ATTR.outcome, result);
      if (result === 'released') this.released(claim);
      return result;
    });
  }

  private released(claim: IdempotencyClaim): void {
    this.instruments().releases.add(1, { operation: this.labelsOf(claim.scoped).operation, tier: tierOf(claim) });
    publishDiagnostics('release', () => ({
      ...this.eventOf(claim.scoped, tierOf(claim)),
      fencingToken: claim.fencingToken,
    }));
  }

  /**
   * A record was stored (completed) by the authoritative tier, on every path (fast, durable,
   * transactional): its body size is recorded and the `complete` event published.
   */
  recordStored(claim: IdempotencyClaim, stored: StoredResponse): void {
    if (this.metered())
      this.instruments().recordSize.record(stored.body?.length ?? 0, {
        operation: this.labelsOf(claim.scoped).operation,
        tier: tierOf(claim),
        outcome: stored.bodyOmitted ? 'body_omitted' : 'stored',
      });
    publishDiagnostics('complete', () => ({
      ...this.eventOf(claim.scoped, tierOf(claim)),
      fencingToken: claim.fencingToken,
    }));
  }

  /** A claim was fenced out (`phase`: where it found out). Counted and logged once per claim. */
  lostLease(claim: IdempotencyClaim, phase: string): void {
    if (this.lostClaims.has(claim)) return;
    this.lostClaims.add(claim);
    const { operation, tenant } = this.labelsOf(claim.scoped);
    this.instruments().lostLeases.add(1, { operation, phase });
    publishDiagnostics('leaseLost', () => ({
      ...this.eventOf(claim.scoped, tierOf(claim)),
      fencingToken: claim.fencingToken,
      phase,
    }));
    this.logger.warn(
      formatLogLine('lost claim: another claim owns the record; this result is not stored', {
        event: 'lost_lease',
        keyHash: claim.scoped.id,
        tenant,
        operation,
        outcome: 'fenced_out',
        phase,
        fencing: claim.fencingToken,
      }),
    );
  }

  /**
   * A completion or release that failed on every try while the lease could be held: the claim is
   * given up, its lease lapses, and recovery decides the key. Counted and logged.
   */
  finishGivenUp(claim: IdempotencyClaim, action: 'complete' | 'release', error: unknown): void {
    const { operation, tenant } = this.labelsOf(claim.scoped);
    this.instruments().finishGivenUp.add(1, { operation, action });
    const cause = error as { message?: unknown } | null;
    this.logger.error(
      formatLogLine(`${action} given up: its lease can no longer be held; it lapses, then recovery decides the key`, {
        event: 'finish_given_up',
        keyHash: claim.scoped.id,
        tenant,
        operation,
        outcome: 'lease_lapses_then_recovery',
        phase: action,
        error: typeof cause?.message === 'string' ? cause.message : String(error),
      }),
    );
  }

  /**
   * A store failure the engine or an adapter handled: one error line. `outcome` says what became
   * of the request (`not_run`, `kept_until_lease_lapses`, `durable_answers`, ...). Counting is done
   * by the instrumented store itself, per call.
   */
  storeError(scoped: ScopedKey, event: { phase: string; outcome: string; error: unknown }): void {
    const { operation, tenant } = this.labelsOf(scoped);
    const error = event.error as { message?: unknown; tier?: unknown };
    this.logger.error(
      formatLogLine('idempotency store error', {
        event: 'store_error',
        keyHash: scoped.id,
        tenant,
        operation,
        outcome: event.outcome,
        phase: event.phase,
        tier: typeof error?.tier === 'string' ? error.tier : undefined,
        error: typeof error?.message === 'string' ? error.message : String(event.error),
      }),
    );
  }

  /** The store failed and the route runs unprotected (`onStoreError: 'fail-open'`): counted and logged. */
  failOpen(scoped: ScopedKey): void {
    const { operation, tenant } = this.labelsOf(scoped);
    this.instruments().failOpen.add(1, { operation });
    this.logger.warn(
      formatLogLine('store unavailable, running unprotected (fail-open)', {
        event: 'fail_open',
        keyHash: scoped.id,
        tenant,
        operation,
        outcome: 'unprotected',
      }),
    );
  }

  /** A stored record could not be opened (encryption at rest): logged; the request fails closed. */
  unreadableRecord(keyHash: string, reason: string): void {
    this.logger.error(
      formatLogLine('unreadable idempotency record; failing closed', {
        event: 'record_unreadable',
        keyHash,
        outcome: 'failed_closed',
        error: reason,
      }),
    );
  }

  private countVerdict(scoped: ScopedKey, tier: StoreTier, result: BeginResult): void {
    const { operation } = this.labelsOf(scoped);
    const instruments = this.instruments();
    switch (result.kind) {
      case 'claimed': {
        const { claim } = result;
        instruments.claims.add(1, { operation, tier, outcome: claim.tookOver ? 'takeover' : 'fresh' });
        if (claim.tookOver)
          this.takeover(scoped, tier, 'taken_over', {
            fencing: claim.fencingToken,
            transactional: claim.policy.transactional,
          });
        publishDiagnostics('claim', () => ({
          ...this.eventOf(scoped, tier),
          tookOver: claim.tookOver,
          fencingToken: claim.fencingToken,
        }));
        return;
      }
      case 'replay':
      case 'replay-unavailable':
        instruments.replays.add(1, { operation, outcome: result.kind === 'replay' ? 'replayed' : 'unavailable' });
        publishDiagnostics('replay', () => ({
          ...this.eventOf(scoped, tier),
          statusCode: result.response.statusCode,
          replayable: result.kind === 'replay',
        }));
        activeTracer()
          ?.startSpan(IDEMPOTENCY_SPANS.replay, {
            attributes: {
              ...this.spanAttributes(scoped),
              [ATTR.statusCode]: result.response.statusCode,
              [ATTR.outcome]: result.kind,
            },
          })
          .end();
        return;
      case 'mismatch':
      case 'in-progress': {
        const kind = result.kind === 'mismatch' ? 'mismatch' : 'in_progress';
        instruments.conflicts.add(1, { operation, kind });
        publishDiagnostics('conflict', () => ({ ...this.eventOf(scoped, tier), kind }));
        return;
      }
      case 'outcome-unknown':
        this.takeover(scoped, tier, 'outcome_unknown', {});
        return;
    }
  }

  private takeover(
    scoped: ScopedKey,
    tier: StoreTier,
    outcome: 'taken_over' | 'outcome_unknown',
    fields: Record<string, LogFieldValue>,
  ): void {
    const { operation, tenant } = this.labelsOf(scoped);
    this.instruments().takeovers.add(1, { operation, tier, outcome });
    publishDiagnostics('takeover', () => ({ ...this.eventOf(scoped, tier), outcome }));
    const message = outcome === 'taken_over' ? 'takeover of a dead lease' : 'dead lease stored as outcome-unknown';
    this.logger.warn(
      formatLogLine(message, { event: 'takeover', keyHash: scoped.id, tenant, operation, outcome, tier, ...fields }),
    );
  }

  private observeStoreCall<T>(observation: StoreCallObservation, call: () => Promise<T>): Promise<T> {
    const tracer = observation.traced ? activeTracer() : undefined;
    // No SDK: nothing would record the time or the span, so the call runs as it is.
    if (!tracer && !this.metered()) return settledCall(call);
    const { tier, phase } = observation;
    const startedAt = performance.now();
    const measure = (outcome: 'ok' | 'error') => {
      const instruments = this.instruments();
      // A transaction's latency includes the handler: its spans tell that story, the histogram does not.
      if (phase !== 'transaction')
        instruments.storeDuration.record((performance.now() - startedAt) / 1000, { tier, phase, outcome });
      if (outcome === 'error') instruments.storeErrors.add(1, { tier, phase });
    };
    // One promise per call on the hot path: no async wrapper around the store's own.
    const run = (span?: Span): Promise<T> =>
      settledCall(call).then(
        (value) => {
          measure('ok');
          return value;
        },
        (error: unknown) => {
          measure(observation.isStoreFailure() ? 'error' : 'ok');
          span?.setAttribute(ATTR.outcome, 'error');
          throw error;
        },
      );
    if (!tracer) return run();
    return tracer.startActiveSpan(`idempotency.${tier}.${phase}`, { attributes: { [ATTR.tier]: tier } }, (span) =>
      finishSpan(span, run(span)),
    );
  }

  private inSpan<T>(name: string, scoped: ScopedKey, work: (span: Span) => Promise<T>): Promise<T> {
    const tracer = activeTracer();
    if (!tracer) return work(UNTRACED_SPAN);
    return tracer.startActiveSpan(name, { attributes: this.spanAttributes(scoped) }, (span) =>
      finishSpan(span, work(span)),
    );
  }

  private spanAttributes(scoped: ScopedKey): Attributes {
    const { operation, tenant } = this.labelsOf(scoped);
    const attributes: Attributes = { [ATTR.keyHash]: scoped.id, [ATTR.operation]: operation };
    if (tenant !== undefined) attributes[ATTR.tenant] = tenant;
    return attributes;
  }

  private eventOf(scoped: ScopedKey, tier: StoreTier): IdempotencyDiagnosticsEvent {
    const { operation, tenant } = this.labelsOf(scoped);
    return tenant === undefined
      ? { keyHash: scoped.id, operation, tier }
      : { keyHash: scoped.id, operation, tenant, tier };
  }

  /** The operation a claim serves (`POST /orders`, or the route's `operation`), as logs and metrics name it. */
  operationOf(scoped: ScopedKey): string {
    return this.labelsOf(scoped).operation;
  }

  private labelsOf(scoped: ScopedKey): TelemetryLabels {
    return this.labels.get(scoped) ?? { operation: UNKNOWN_OPERATION };
  }

  /** The instruments of the current global meter provider (re-created when the application registers one). */
  private instruments(): Instruments {
    const provider = metrics.getMeterProvider();
    if (this.current?.provider !== provider) {
      const instruments = createInstruments(provider);
      observeHeldClaims(provider, instruments);
      this.current = { provider, instruments, metered: !isNoopMeterProvider(provider) };
    }
    return this.current.instruments;
  }

  /** False while no SDK's meter provider is registered: every instrument is the API's no-op. */
  private metered(): boolean {
    this.instruments();
    return this.current!.metered;
  }
}

function tierOf(claim: IdempotencyClaim): StoreTier {
  return claim.policy.durable ? 'durable' : 'fast';
}
