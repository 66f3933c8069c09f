/**
 * The RFC 9457 problems the interceptor answers with (docs/contract.md B.11): the exception
 * with its headers, and the same problem as raw bytes for a response that must be replaced.
 */
import { IDEMPOTENCY_KEY_HEADER, PROBLEM_CONTENT_TYPE } from '../idempotency.constants.js';
import type { ResolvedModuleSettings } from '../idempotency.options.js';
import {
  buildProblem,
  IdempotencyProblemException,
  type IdempotencyProblemKind,
} from '../errors/idempotency.exceptions.js';
import type { ReplacementResponse } from './response-capture.js';

/** What a problem carries besides its kind. */
export interface ProblemOptions {
  /** The received `Idempotency-Key`, echoed in the response header of the same name. */
  echo?: string;
  /** Overrides the kind's status (the route's `mismatchStatus`). */
  status?: number;
  /** Sent as `Retry-After`, in seconds. */
  retryAfterSeconds?: number;
  /** Extension members of the body (`reason`, `maxBytes`, ...). */
  extensions?: Record<string, unknown>;
  /** More response headers (`Location` of an answer that cannot be replayed). */
  headers?: Record<string, string>;
}

/** The problem of `kind` as an exception, with the headers its response must carry. */
export function createProblemException(
  kind: IdempotencyProblemKind,
  settings: Pick<ResolvedModuleSettings, 'problemTypeBaseUri' | 'problemLanguage' | 'docsUrl'>,
  options: ProblemOptions = {},
): IdempotencyProblemException {
  const { problemTypeBaseUri, problemLanguage, docsUrl } = settings;
  const headers: Record<string, string> = {
    'Content-Language': problemLanguage,
    'Cache-Control': 'no-store',
    ...options.headers,
  };
  if (docsUrl) headers.Link = `<${docsUrl}>; rel="describedby"; type="text/html"`;
  if (options.retryAfterSeconds !== undefined) headers['Retry-After'] = String(options.retryAfterSeconds);
  if (options.echo !== undefined) headers[IDEMPOTENCY_KEY_HEADER] = options.echo;
  return new IdempotencyProblemException(
    buildProblem(kind, problemTypeBaseUri, {
      status: options.status,
      retryAfterSeconds: options.retryAfterSeconds,
      extensions: options.extensions,
    }),
    headers,
  );
}

/** The problem of a claim that could not run or record: lost to another request, or the store is down. */
export function notRunProblemKind(reason: 'lost' | 'store-unavailable'): IdempotencyProblemKind {
  return reason === 'lost' ? 'idempotency-request-in-progress' : 'idempotency-store-unavailable';
}

/** The exception's problem as a response to send in place of a captured one. */
export function problemResponse(exception: IdempotencyProblemException): ReplacementResponse {
  return {
    statusCode: exception.getStatus(),
    headers: { ...exception.headers, 'Content-Type': PROBLEM_CONTENT_TYPE },
    body: Buffer.from(JSON.stringify(exception.problem)),
  };
}
