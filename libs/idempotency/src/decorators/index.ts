export * from './idempotent.decorator.js';
export * from './idempotency-context.decorator.js';
export * from './idempotency-outcome.decorator.js';
