/**
 * `nestjs-idempotency/telemetry`: the names of the OpenTelemetry instruments, spans and span
 * attributes the library records, for dashboards and alerts. Renaming one is a breaking change.
 *
 * @publicApi
 */
export {
  IDEMPOTENCY_INSTRUMENTATION_SCOPE,
  IDEMPOTENCY_METRICS,
  IDEMPOTENCY_SPANS,
  IDEMPOTENCY_SPAN_ATTRIBUTES,
} from './idempotency-telemetry.constants.js';
export {
  IDEMPOTENCY_DIAGNOSTICS_CHANNELS,
  type IdempotencyDiagnosticsEvent,
  type IdempotencyDiagnosticsEvents,
} from './idempotency-diagnostics.js';
