/**
 * `IdempotencyService.run()` called while serving an HTTP request: its verdicts answered as the
 * same RFC 9457 problems the interceptor answers with (docs/contract.md B.11), not a bare 500.
 */
import { PROBLEM_CONTENT_TYPE } from '../idempotency.constants.js';
import type { IdempotencyRunError } from '../errors/idempotency-run.error.js';
import type { ResolvedModuleSettings } from '../idempotency.options.js';
import { createProblemException, problemResponse } from './problem-responses.js';

/** A whole response: status, headers and body bytes. */
export interface ErrorReply {
  statusCode: number;
  headers: Record<string, string>;
  body: Buffer;
}

type ProblemSettings = Pick<ResolvedModuleSettings, 'problemTypeBaseUri' | 'problemLanguage' | 'docsUrl'>;

/**
 * The response of a `run()` verdict: `key-reused` → 422, `in-progress` → 409 with `Retry-After`,
 * `replay-unavailable` → 409 (`operationCompleted: true`), `outcome-unknown` → 500, each the
 * interceptor's problem; `replayed-failure` → the stored failure again (its status and body, as a
 * replay); `result-unencodable` → a plain 500 problem (the function ran; its value could not be kept).
 */
export function runErrorResponse(error: IdempotencyRunError, settings: ProblemSettings): ErrorReply {
  switch (error.kind) {
    case 'key-reused':
      return problemResponse(createProblemException('idempotency-key-reused', settings));
    case 'in-progress':
      return problemResponse(
        createProblemException('idempotency-request-in-progress', settings, {
          retryAfterSeconds: error.details.retryAfterSeconds ?? 1,
        }),
      );
    case 'replay-unavailable':
      return problemResponse(
        createProblemException('idempotency-replay-unavailable', settings, {
          extensions: { operationCompleted: true },
        }),
      );
    case 'outcome-unknown':
      return problemResponse(createProblemException('idempotency-outcome-unknown', settings));
    case 'replayed-failure': {
      const status = error.details.status ?? 500;
      const body = error.details.body === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(error.details.body));
      return { statusCode: status, headers: { 'Content-Type': 'application/json' }, body };
    }
    case 'result-unencodable':
      return {
        statusCode: 500,
        headers: { 'Content-Type': PROBLEM_CONTENT_TYPE, 'Cache-Control': 'no-store' },
        body: Buffer.from(JSON.stringify({ type: 'about:blank', title: 'Internal Server Error', status: 500 })),
      };
  }
}
