export * from './idempotency-record.interface.js';
