import { IdempotencyRunError } from '../errors/idempotency-run.error.js';
import { runErrorResponse } from './run-error-problems.js';

const settings = { problemTypeBaseUri: 'https://api.test/problems/', problemLanguage: 'en' };
const bodyOf = (error: IdempotencyRunError) => JSON.parse(runErrorResponse(error, settings).body.toString('utf8'));

describe('run() errors as HTTP answers', () => {
  it.each<[IdempotencyRunError, number, string]>([
    [new IdempotencyRunError('key-reused', 'x'), 422, 'idempotency_key_reused'],
    [new IdempotencyRunError('in-progress', 'x', { retryAfterSeconds: 3 }), 409, 'idempotency_request_in_progress'],
    [new IdempotencyRunError('replay-unavailable', 'x'), 409, 'idempotency_replay_unavailable'],
    [new IdempotencyRunError('outcome-unknown', 'x'), 500, 'idempotency_outcome_unknown'],
  ])('%s is the interceptor’s problem', (error, status, code) => {
    const reply = runErrorResponse(error, settings);
    expect(reply.statusCode).toBe(status);
    expect(reply.headers['Content-Type']).toBe('application/problem+json');
    expect(bodyOf(error)).toMatchObject({
      status,
      code,
      type: `https://api.test/problems/${code.replaceAll('_', '-')}`,
    });
  });

  it('in-progress carries Retry-After; replay-unavailable says the operation completed', () => {
    expect(
      runErrorResponse(new IdempotencyRunError('in-progress', 'x', { retryAfterSeconds: 3 }), settings).headers[
        'Retry-After'
      ],
    ).toBe('3');
    expect(bodyOf(new IdempotencyRunError('replay-unavailable', 'x')).operationCompleted).toBe(true);
  });

  it('a replayed failure answers the stored status and body again', () => {
    const error = new IdempotencyRunError('replayed-failure', 'x', { status: 402, body: { message: 'declined' } });
    const reply = runErrorResponse(error, settings);
    expect(reply.statusCode).toBe(402);
    expect(JSON.parse(reply.body.toString('utf8'))).toEqual({ message: 'declined' });
  });

  it('an unencodable result is a plain 500 problem', () => {
    const reply = runErrorResponse(new IdempotencyRunError('result-unencodable', 'x'), settings);
    expect(reply.statusCode).toBe(500);
    expect(JSON.parse(reply.body.toString('utf8'))).toEqual({
      type: 'about:blank',
      title: 'Internal Server Error',
      status: 500,
    });
  });
});
