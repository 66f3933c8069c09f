import { AsyncLocalStorage } from 'node:async_hooks';
import type { IdempotencyContextRef } from './idempotency-context.js';

/**
 * The idempotency context of the handler a piece of code runs under, without passing it down:
 * what lets an outgoing client (`nestjs-idempotency/client`) reuse the request's derived key.
 *
 * Tracking is off until something asks for it: before Node 24, `AsyncLocalStorage` is built on
 * async hooks, which cost every promise of the process something once enabled, and a service
 * that never calls out with the client should not pay for it.
 */
const ambient = new AsyncLocalStorage<IdempotencyContextRef>();
let tracking = false;

/** Turns tracking on for the rest of the process (the client does, when one is created). */
export function trackIdempotencyContext(): void {
  tracking = true;
}

/** Runs a claimed handler so that {@link currentIdempotencyContext} returns its context. */
export function runInIdempotencyContext<T>(context: IdempotencyContextRef, fn: () => T): T {
  return tracking ? ambient.run(context, fn) : fn();
}

/**
 * The context of the claimed handler this code runs in, or undefined outside one (or before
 * tracking was turned on: creating a client of `nestjs-idempotency/client` turns it on).
 *
 * @example
 * const key = currentIdempotencyContext()?.derivedKey('ledger') ?? randomUUID();
 * @publicApi
 */
export function currentIdempotencyContext(): IdempotencyContextRef | undefined {
  return ambient.getStore();
}
