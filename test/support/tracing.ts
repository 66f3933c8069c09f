import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';

/** An OpenTelemetry tracing SDK for one test file: spans kept in memory, async context tracked. */
export interface TestTracing {
  readonly spans: InMemorySpanExporter;
  /** Finished spans as a tree: the parent of a span (undefined for a root or an unknown parent). */
  parentOf(span: ReadableSpan): ReadableSpan | undefined;
  /** Names of the finished spans whose parent is `span`, sorted. */
  childrenOf(span: ReadableSpan): string[];
  stop(): Promise<void>;
}

/** Registers a global context manager and tracer provider; `stop()` unregisters both. */
export function startTracing(): TestTracing {
  const spans = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(provider);
  const byId = () => new Map(spans.getFinishedSpans().map((span) => [span.spanContext().spanId, span]));
  return {
    spans,
    parentOf: (span) => byId().get(span.parentSpanContext?.spanId ?? ''),
    childrenOf: (span) =>
      spans
        .getFinishedSpans()
        .filter((child) => child.parentSpanContext?.spanId === span.spanContext().spanId)
        .map((child) => child.name)
        .sort(),
    async stop() {
      await provider.shutdown();
      trace.disable();
      context.disable();
    },
  };
}

/**
 * What a server with HTTP instrumentation does: each request is handled inside its own active
 * span (`HTTP <method> <url>`), ended when the response has gone.
 */
export function traceEveryRequest(server: Server): void {
  const tracer = trace.getTracer('test-http');
  const handlers = server.listeners('request') as Array<(req: IncomingMessage, res: ServerResponse) => void>;
  server.removeAllListeners('request');
  server.on('request', (req: IncomingMessage, res: ServerResponse) =>
    tracer.startActiveSpan(`HTTP ${req.method} ${req.url}`, (span) => {
      res.once('close', () => span.end());
      for (const handler of handlers) handler.call(server, req, res);
    }),
  );
}
