/**
 * Where an idempotency interceptor stands towards the request it is handed (bound twice on a
 * route, the second one passes through), the route's `ExecutionContext` for the scope resolvers,
 * and the library's own async context, so services a handler calls can read its
 * `IdempotencyContextRef` without a parameter.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { ExecutionContext } from '@nestjs/common';
import { tap, type Observable } from 'rxjs';
import type { IdempotencyContextRef } from '../engine/idempotency-context.js';

/** What the current async flow runs for: a protected HTTP request, or a claimed `run()`. */
interface ContextFrame {
  /** The HTTP request: its context is read from it, because the interceptor attaches it once the key is claimed. */
  request?: object;
  /** The context of a `run()` call, known when the frame starts. */
  context?: IdempotencyContextRef;
}

/**
 * Entered only once something depends on `IdempotencyContextAccessor`: before Node 24 an
 * enabled `AsyncLocalStorage` runs on async hooks, which cost every promise of the process.
 */
const frames = new AsyncLocalStorage<ContextFrame>();
let tracking = false;

const EXECUTION_CONTEXT = Symbol('idempotency.executionContext');
/** An interceptor is about to handle (`entering`) or handles (`handling`) the request. */
const HANDLING = Symbol('idempotency.handling');
/** Where the interceptor leaves the context on the request object (shared with `@IdempotencyContext()`). */
export const IDEMPOTENCY_CONTEXT = Symbol.for('idempotency.context');

type Marked = Record<symbol, unknown>;

/**
 * Where an idempotency interceptor stands towards `request`: `outside` (it must enter it with
 * `runForRequest()` first), `entered` (it handles the request), or `nested` inside another
 * interceptor's handling of the same request (the interceptor is bound twice on the route): it
 * passes the request through instead of finding its own claim in progress. The mark is cleared
 * when the handling fails or completes, so an outer layer's `retry()` re-enters as `outside`.
 */
export type RequestEntry = 'outside' | 'entered' | 'nested';

export function enterRequest(request: object): RequestEntry {
  const state = (request as Marked)[HANDLING];
  if (state === 'handling') return 'nested';
  if (state !== 'entering') return 'outside';
  (request as Marked)[HANDLING] = 'handling';
  return 'entered';
}

/**
 * Runs `intercept` (the interceptor, called again) as the handling of `request`: remembers the
 * route's `ExecutionContext` for the resolvers, and runs in the request's async frame when the
 * context is tracked.
 */
export async function runForRequest(
  request: object,
  context: ExecutionContext,
  intercept: () => Promise<Observable<unknown>>,
): Promise<Observable<unknown>> {
  const marked = request as Marked;
  marked[EXECUTION_CONTEXT] = context;
  marked[HANDLING] = 'entering';
  // Not `delete`: the mark is rarely the request's last property, and deleting any other one
  // turns Node's request object into a slow dictionary (3 KB allocated, slower reads after).
  const done = () => {
    marked[HANDLING] = undefined;
  };
  let handled: Observable<unknown>;
  try {
    handled = await (tracking ? frames.run({ request }, intercept) : intercept());
  } catch (error) {
    done();
    throw error;
  }
  // Not on unsubscribe: a departed client does not end the handler, nor what it may still call.
  return handled.pipe(tap({ error: done, complete: done }));
}

/** Runs `fn` as the flow of a claimed `run()` call. */
export function runWithContext<T>(context: IdempotencyContextRef, fn: () => T): T {
  return tracking ? frames.run({ context }, fn) : fn();
}

/** From now on, protected requests and `run()` calls keep their context in their async flow. */
export function trackContexts(): void {
  tracking = true;
}

export function tracksContexts(): boolean {
  return tracking;
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
