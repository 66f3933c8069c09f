import { HttpException } from '@nestjs/common';
import { IdempotencyClaimLostError } from './idempotency-claim-lost.error.js';
import { IdempotencyConfigurationError } from './idempotency-configuration.error.js';
import {
  forcedOutcomeOf,
  IdempotencyFinalError,
  IdempotencyFinalException,
  IdempotencyTransientError,
  IdempotencyTransientException,
} from './idempotency-outcome.exceptions.js';
import { IdempotencyRecordUnreadableError } from './idempotency-record-unreadable.error.js';
import { IdempotencyRunError } from './idempotency-run.error.js';
import { IdempotencyStoreError } from './idempotency-store.error.js';
import { IdempotencyError } from './idempotency.error.js';

describe('IdempotencyError: the base of the plain errors', () => {
  it.each([
    ['IdempotencyClaimLostError', new IdempotencyClaimLostError('hash')],
    ['IdempotencyConfigurationError', new IdempotencyConfigurationError('bad')],
    ['IdempotencyRecordUnreadableError', new IdempotencyRecordUnreadableError('no', 'no-cipher')],
    ['IdempotencyRunError', new IdempotencyRunError('in-progress', 'busy')],
    ['IdempotencyStoreError', new IdempotencyStoreError('down', 'durable')],
  ])('%s is an IdempotencyError and an Error, named after its class', (name, error) => {
    expect(error).toBeInstanceOf(IdempotencyError);
    expect(error).toBeInstanceOf(Error);
    expect(error.name).toBe(name);
  });

  it('keeps the cause of a store error', () => {
    const cause = new Error('ECONNREFUSED');
    expect(new IdempotencyStoreError('down', 'fast', { cause }).cause).toBe(cause);
  });
});

describe('IdempotencyFinalException and IdempotencyTransientException', () => {
  it('are HttpExceptions that force the outcome of the key', () => {
    const final = new IdempotencyFinalException({ title: 'declined' }, 402);
    const transient = new IdempotencyTransientException({ title: 'busy' }, 503);
    expect(final).toBeInstanceOf(HttpException);
    expect(final.getStatus()).toBe(402);
    expect(forcedOutcomeOf(final)).toBe('store');
    expect(forcedOutcomeOf(transient)).toBe('release');
    expect(forcedOutcomeOf(new HttpException('other', 400))).toBeUndefined();
  });

  it('keep their deprecated *Error names as aliases of the same classes', () => {
    expect(IdempotencyFinalError).toBe(IdempotencyFinalException);
    expect(IdempotencyTransientError).toBe(IdempotencyTransientException);
    const legacy: IdempotencyFinalError = new IdempotencyFinalError({ title: 'declined' }, 402);
    expect(legacy).toBeInstanceOf(IdempotencyFinalException);
    expect(forcedOutcomeOf(new IdempotencyTransientError({ title: 'busy' }, 503))).toBe('release');
  });
});
