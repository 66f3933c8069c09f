/**
 * The claim gauges (`idempotency.claims.active`, `idempotency.claims.oldest_age`) of the whole
 * process: every engine registers where its live claims are, and one callback per meter
 * provider sums them, so that two applications in one process (or one closed and one live)
 * never hide each other's claims.
 */
import type { MeterProvider } from '@opentelemetry/api';
import type { Instruments } from './idempotency-instruments.js';

/** The claims one engine holds: how many, and since when the oldest one. */
export interface HeldClaims {
  count: number;
  oldestSinceMs?: number;
}

const sources = new Set<() => HeldClaims>();
const observedProviders = new WeakSet<MeterProvider>();

/** Adds an engine's claims to the gauges; the returned function takes them out again (shutdown). */
export function addHeldClaimsSource(source: () => HeldClaims): () => void {
  sources.add(source);
  return () => {
    sources.delete(source);
  };
}

/** Observes the gauges on `provider`'s instruments, once per provider whichever engine asks. */
export function observeHeldClaims(provider: MeterProvider, instruments: Instruments): void {
  if (observedProviders.has(provider)) return;
  observedProviders.add(provider);
  instruments.activeClaims.addCallback((result) => {
    let count = 0;
    for (const source of sources) count += source().count;
    result.observe(count);
  });
  instruments.oldestClaimAge.addCallback((result) => {
    let oldest = Infinity;
    for (const source of sources) oldest = Math.min(oldest, source().oldestSinceMs ?? Infinity);
    result.observe(oldest === Infinity ? 0 : Math.max(0, Date.now() - oldest) / 1000);
  });
}
