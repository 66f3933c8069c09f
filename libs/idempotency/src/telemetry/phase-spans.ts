/** Spans of the library's phases: the tracer to start them with, and how they end. */

import {
  INVALID_SPAN_CONTEXT,
  SpanStatusCode,
  trace,
  type Span,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';
import { IDEMPOTENCY_INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION } from './idempotency-telemetry.constants.js';

/** Handed to phases while tracing is off: records nothing, like the API's own no-op spans. */
export const UNTRACED_SPAN: Span = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/** The API's global provider: a proxy that has a delegate tracer once an SDK is registered. */
type GlobalTracerProvider = TracerProvider & {
  getDelegateTracer?: (name: string, version?: string) => Tracer | undefined;
};

/**
 * The tracer of the registered SDK, or undefined while none is registered: then phases run
 * without spans or context switches, which would only create and discard no-op spans on the
 * hot path. Looked up per call, so an SDK registered after startup is used at once.
 */
export function activeTracer(): Tracer | undefined {
  const provider = trace.getTracerProvider() as GlobalTracerProvider;
  // Not the API's proxy (another copy of the API registered it): always trace through it.
  if (typeof provider.getDelegateTracer !== 'function')
    return provider.getTracer(IDEMPOTENCY_INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION);
  return provider.getDelegateTracer(IDEMPOTENCY_INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION);
}

/** `call()`, with a synchronous throw turned into a rejection. */
export function settledCall<T>(call: () => Promise<T>): Promise<T> {
  try {
    return call();
  } catch (error) {
    return Promise.reject(error);
  }
}

/** Ends the span when `work` settles, with an error status and the exception when it rejects. */
export async function finishSpan<T>(span: Span, work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (error) {
    span.recordException(error instanceof Error ? error : String(error));
    span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.name : undefined });
    throw error;
  } finally {
    span.end();
  }
}
