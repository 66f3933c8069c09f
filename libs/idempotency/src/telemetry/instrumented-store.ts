/** Which tier a store call went to. */
export type StoreTier = 'fast' | 'durable';

/** How a store call is observed: `traced` asks for a span; `isStoreFailure` tells its own failures from its work's. */
export interface StoreCallObservation {
  tier: StoreTier;
  /** The store call, snake_case (`claim`, `take_over`, `complete`, ...). */
  phase: string;
  traced: boolean;
  /** False for errors that are not the store's (a transaction's work that threw). */
  isStoreFailure(): boolean;
}

export type StoreCallObserver = <T>(observation: StoreCallObservation, call: () => Promise<T>) => Promise<T>;

/** Store calls that are observed, with their metric phase and whether they get a span. */
const OBSERVED_CALLS: Record<string, { phase: string; traced: boolean }> = {
  claim: { phase: 'claim', traced: true },
  takeOver: { phase: 'take_over', traced: true },
  complete: { phase: 'complete', traced: true },
  release: { phase: 'release', traced: true },
  restore: { phase: 'restore', traced: true },
  transaction: { phase: 'transaction', traced: true },
  // Heartbeats and background work: measured, but no spans (they outlive the request's trace).
  extend: { phase: 'extend', traced: false },
  get: { phase: 'get', traced: false },
  deleteExpired: { phase: 'delete_expired', traced: false },
};

/** A member of a store that is a function, as the proxy sees it. */
type StoreMethod = (...args: unknown[]) => unknown;

/**
 * Wraps a fast or durable store at the engine boundary, so every store is measured the same way
 * without touching its code. The wrapper is a `Proxy`: `instanceof` and every other member behave
 * as on the store itself, and methods run with the store as `this` (private fields keep working).
 */
export function instrumentStore<S extends object>(store: S, tier: StoreTier, observe: StoreCallObserver): S {
  // One wrapper per method, made on first use: store calls are on every request's hot path.
  const wrappers = new Map<PropertyKey, { method: StoreMethod; wrapper: StoreMethod }>();
  const wrap = (property: PropertyKey, method: StoreMethod): StoreMethod => {
    const observed = typeof property === 'string' ? OBSERVED_CALLS[property] : undefined;
    if (!observed) return method.bind(store);
    if (property !== 'transaction') {
      // Made once per method: store calls are on every request's hot path.
      const observation: StoreCallObservation = { tier, ...observed, isStoreFailure: () => true };
      return (...args: unknown[]) => observe(observation, () => method.apply(store, args) as Promise<unknown>);
    }
    return (...args: unknown[]) => {
      // A transaction's work may throw (the handler's failure, a deliberate rollback): not a store failure.
      let workFailed = false;
      if (typeof args[2] === 'function') {
        const work = args[2] as (...a: unknown[]) => Promise<unknown>;
        args[2] = (...a: unknown[]) =>
          work(...a).catch((error: unknown) => {
            workFailed = true;
            throw error;
          });
      }
      const isStoreFailure = () => !workFailed;
      // Every observed call is one of the store's async methods.
      return observe({ tier, ...observed, isStoreFailure }, () => method.apply(store, args) as Promise<unknown>);
    };
  };
  return new Proxy(store, {
    get(target, property) {
      // Read with the store as receiver: getters over private fields would throw on the proxy.
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      const cached = wrappers.get(property);
      // A method replaced on the instance (a test's spy) gets a wrapper of its own.
      if (cached?.method === value) return cached.wrapper;
      const method = value as StoreMethod;
      const wrapper = wrap(property, method);
      wrappers.set(property, { method, wrapper });
      return wrapper;
    },
  });
}
