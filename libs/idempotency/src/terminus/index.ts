/**
 * `nestjs-idempotency/terminus`: the health indicator for `@nestjs/terminus`. The only part of the
 * library that imports Terminus, so an application without it never loads it.
 */
export {
  IdempotencyHealthIndicator,
  type IdempotencyHealthOptions,
  type IdempotencyTierHealth,
} from './idempotency-health.indicator.js';
