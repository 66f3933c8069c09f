export { IdempotencyTelemetry, type TelemetryLabels } from './idempotency-telemetry.js';
export {
  IDEMPOTENCY_INSTRUMENTATION_SCOPE,
  IDEMPOTENCY_METRICS,
  IDEMPOTENCY_SPANS,
  IDEMPOTENCY_SPAN_ATTRIBUTES,
} from './idempotency-telemetry.constants.js';
export { formatLogLine, type LogFieldValue } from './log-line.js';
