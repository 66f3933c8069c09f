/**
 * The library's own async context: which request (or `run()` call) the current code runs for,
 * so services a handler calls can read its `IdempotencyContextRef` without a parameter, and
 * scope resolvers can be handed the route's `ExecutionContext`.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { ExecutionContext } from '@nestjs/common';
import type { IdempotencyContextRef } from '../engine/idempotency-context.js';

/** What the current async flow runs for: a protected HTTP request, or a claimed `run()`. */
interface ContextFrame {
  /** The HTTP request: its context is read from it, because the interceptor attaches it once the key is claimed. */
  request?: object;
  /** The context of a `run()` call, known when the frame starts. */
  context?: IdempotencyContextRef;
  /** An idempotency interceptor handles the request in this flow: one bound a second time passes through. */
  handled?: boolean;
}

/**
 * Where an idempotency interceptor stands towards a request: `outside` its flow (it must enter it
 * first), `entered` (it handles the request), or `nested` inside another interceptor's handling of
 * the same request (the interceptor is bound twice on the route): it passes through instead of
 * finding its own claim in progress. An outer layer's `retry()` re-subscribes from outside the
 * flow, so a re-entry is never taken for a nested binding.
 */
export type RequestEntry = 'outside' | 'entered' | 'nested';

const frames = new AsyncLocalStorage<ContextFrame>();
const EXECUTION_CONTEXT = Symbol('idempotency.executionContext');
/** Where the interceptor leaves the context on the request object (shared with `@IdempotencyContext()`). */
export const IDEMPOTENCY_CONTEXT = Symbol.for('idempotency.context');

/** Runs `fn` as the flow of `request`, remembering the route's `ExecutionContext` for the resolvers. */
export function runForRequest<T>(request: object, context: ExecutionContext, fn: () => T): T {
  (request as Record<symbol, unknown>)[EXECUTION_CONTEXT] = context;
  return frames.run({ request }, fn);
}

/** See `RequestEntry`. Marks the request handled in this flow when it returns `entered`. */
export function enterRequest(request: object): RequestEntry {
  const frame = frames.getStore();
  if (frame?.request !== request) return 'outside';
  if (frame.handled) return 'nested';
  frame.handled = true;
  return 'entered';
}

/** Runs `fn` as the flow of a claimed `run()` call. */
export function runWithContext<T>(context: IdempotencyContextRef, fn: () => T): T {
  return frames.run({ context }, fn);
}

/** The context of the request (undefined when it runs without a key). */
export function getIdempotencyContext(request: object): IdempotencyContextRef | undefined {
  return (request as Record<symbol, IdempotencyContextRef | undefined>)[IDEMPOTENCY_CONTEXT];
}

/** The context of the flow this code runs in, if it runs for a claimed request or `run()` call. */
export function currentIdempotencyContext(): IdempotencyContextRef | undefined {
  const frame = frames.getStore();
  if (!frame) return undefined;
  return frame.context ?? (frame.request ? getIdempotencyContext(frame.request) : undefined);
}

/** The `ExecutionContext` of the route the interceptor runs `request` for. */
export function executionContextOf(request: object): ExecutionContext | undefined {
  return (request as Record<symbol, ExecutionContext | undefined>)[EXECUTION_CONTEXT];
}
