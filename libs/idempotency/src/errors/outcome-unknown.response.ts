/**
 * The stored answer of a key whose first run died under `staleLock: 'fail'`: the 500
 * `idempotency-outcome-unknown` problem as a response. Built here, on the HTTP side, and handed
 * to the engine through the module's settings, so the engine stores it without knowing HTTP.
 */
import { PROBLEM_CONTENT_TYPE } from '../idempotency.constants.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import { buildProblem } from './idempotency.exceptions.js';

/** The 500 problem, its `type` under `problemTypeBaseUri` (which ends with '/'), in `problemLanguage`. */
export function outcomeUnknownResponse(problemTypeBaseUri: string, problemLanguage: string): StoredResponse {
  const problem = buildProblem('idempotency-outcome-unknown', problemTypeBaseUri);
  return {
    statusCode: problem.status,
    headers: {
      'content-type': PROBLEM_CONTENT_TYPE,
      'content-language': problemLanguage,
      'cache-control': 'no-store',
    },
    body: Buffer.from(JSON.stringify(problem)),
  };
}
