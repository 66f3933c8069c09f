import { randomUUID } from 'node:crypto';
import { currentIdempotencyContext } from '../context/idempotency-request-context.js';

/** Where the key of an outgoing call came from. */
export type IdempotencyKeySource =
  /** Given by the caller (`idempotencyKey`, or an `Idempotency-Key` header already set). */
  | 'explicit'
  /** Derived from the idempotency context of the request being handled: the same on its retries. */
  | 'context'
  /** A new random key: one per logical call, the same on all of its attempts. */
  | 'random';

export interface ChosenKey {
  key: string;
  source: IdempotencyKeySource;
}

/**
 * The key of one logical call: the caller's, else the one derived from the claimed request this
 * code runs under (stable across that request's retries and re-runs, so a re-run handler sends
 * its downstream call the key it sent before), else a random one.
 *
 * @param explicit the caller's key, if any
 * @param name what tells this call apart from the handler's other downstream calls
 */
export function chooseIdempotencyKey(explicit: string | undefined, name: string): ChosenKey {
  if (explicit !== undefined && explicit !== '') return { key: explicit, source: 'explicit' };
  const context = currentIdempotencyContext();
  if (context) return { key: context.derivedKey(name), source: 'context' };
  return { key: randomUUID(), source: 'random' };
}

/** The default name of a call in its handler: its method and its URL without the query. */
export function defaultCallName(method: string, url: string): string {
  try {
    const parsed = new URL(url);
    return `${method.toUpperCase()} ${parsed.origin}${parsed.pathname}`;
  } catch {
    return `${method.toUpperCase()} ${url}`;
  }
}
