export * from './idempotency-record.interface.js';
export * from './idempotency-module-options.interface.js';
