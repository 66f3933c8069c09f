import { UnprocessableEntityException } from '@nestjs/common';
import { IdempotencyRunError, type IdempotencyRunErrorKind } from '../errors/idempotency-run.error.js';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import { IdempotentConsumerKeyError } from './idempotent-consumer-key.error.js';
import { messageDisposition } from './message-disposition.js';
import { UnparsableMessageError } from './unparsable-message.js';

describe('messageDisposition', () => {
  it('acknowledges a handled message and a duplicate of a completed one', () => {
    expect(messageDisposition({ ok: true, status: 'fresh' })).toEqual({ action: 'ack', reason: 'handled' });
    expect(messageDisposition({ ok: true, status: 'replayed' })).toEqual({ action: 'ack', reason: 'duplicate' });
  });

  it('follows the outcome policy on a handler failure: stored → ack, released → retry', () => {
    const error = new UnprocessableEntityException();
    expect(messageDisposition({ ok: false, error, handlerOutcome: 'store' })).toEqual({
      action: 'ack',
      reason: 'stored-failure',
    });
    expect(messageDisposition({ ok: false, error, handlerOutcome: 'release' })).toEqual({
      action: 'retry',
      reason: 'transient-failure',
    });
  });

  it('retries an in-progress duplicate after the remaining lease (at least a second)', () => {
    const inProgress = (retryAfterSeconds?: number) =>
      messageDisposition({ ok: false, error: new IdempotencyRunError('in-progress', 'busy', { retryAfterSeconds }) });
    expect(inProgress(7)).toEqual({ action: 'retry', reason: 'in-progress', retryAfterMs: 7000 });
    expect(inProgress(undefined)).toEqual({ action: 'retry', reason: 'in-progress', retryAfterMs: 1000 });
  });

  it.each<[IdempotencyRunErrorKind, object]>([
    ['replayed-failure', { action: 'ack', reason: 'stored-failure' }],
    ['replay-unavailable', { action: 'ack', reason: 'replay-unavailable' }],
    ['result-unencodable', { action: 'ack', reason: 'handled' }],
    ['key-reused', { action: 'dead-letter', reason: 'key-reused' }],
    ['outcome-unknown', { action: 'dead-letter', reason: 'outcome-unknown' }],
  ])('maps run() refusing with %s', (kind, expected) => {
    expect(messageDisposition({ ok: false, error: new IdempotencyRunError(kind, kind) })).toEqual(expected);
  });

  it('dead-letters poison: no key, a body that does not parse', () => {
    expect(messageDisposition({ ok: false, error: new IdempotentConsumerKeyError('mailer') })).toEqual({
      action: 'dead-letter',
      reason: 'missing-key',
    });
    expect(messageDisposition({ ok: false, error: new UnparsableMessageError('mailer', 'not JSON') })).toEqual({
      action: 'dead-letter',
      reason: 'unparsable-body',
    });
  });

  it('retries what it does not recognise (a store that is down)', () => {
    expect(messageDisposition({ ok: false, error: new IdempotencyStoreError('down', 'fast') })).toEqual({
      action: 'retry',
      reason: 'transient-failure',
    });
  });
});
