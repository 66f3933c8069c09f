import { HttpException } from '@nestjs/common';

/**
 * An RFC 9457 problem body. `type` is the primary identifier; `code` is the stable snake_case
 * id for clients that prefer codes (docs/contract.md B.11).
 *
 * @publicApi
 */
export interface ProblemDetails {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  /** Whether the same request, with the same key, may be sent again (see `Retry-After`). */
  retryable?: boolean;
  /** Seconds to wait before that retry, the same as the `Retry-After` header, when there is one. */
  retryAfter?: number;
  [extension: string]: unknown;
}

/**
 * The problem kinds of docs/contract.md B.11, plus `idempotency-scope-unresolved` (rule 13),
 * `idempotency-request-too-large` (413: the body to fingerprint exceeds `maxFingerprintedBodyBytes`)
 * and `idempotency-record-unreadable` (500: a stored response that does not decrypt; fails closed).
 *
 * @publicApi
 */
export type IdempotencyProblemKind =
  | 'idempotency-key-missing'
  | 'idempotency-key-invalid'
  | 'idempotency-key-reused'
  | 'idempotency-request-in-progress'
  | 'idempotency-store-unavailable'
  | 'idempotency-replay-unavailable'
  | 'idempotency-outcome-unknown'
  | 'idempotency-scope-unresolved'
  | 'idempotency-request-too-large'
  | 'idempotency-record-unreadable';

/**
 * Whether a client may send the same request again, with the same key, and expect a different
 * answer: true only while the outcome is still open (another attempt runs, the store is down).
 * Every other problem is final for that request: fix it, or look the result up.
 */
const PROBLEMS: Record<IdempotencyProblemKind, { status: number; title: string; detail: string; retryable: boolean }> =
  {
    'idempotency-key-missing': {
      status: 400,
      title: 'Idempotency-Key is missing',
      detail:
        'This operation requires an Idempotency-Key header. Send a unique key (a UUID is recommended) and reuse it when you retry.',
      retryable: false,
    },
    'idempotency-key-invalid': {
      status: 400,
      title: 'Idempotency-Key is invalid',
      detail:
        'The Idempotency-Key header is not a valid key. Send a string of 1 to 255 visible ASCII characters, for example a UUID.',
      retryable: false,
    },
    'idempotency-key-reused': {
      status: 422,
      title: 'Idempotency-Key is already used',
      detail:
        'This Idempotency-Key was already used with a different request payload for this operation. Use a new key for a new request.',
      retryable: false,
    },
    'idempotency-request-in-progress': {
      status: 409,
      title: 'A request is outstanding for this Idempotency-Key',
      detail:
        'A request with the same Idempotency-Key for the same operation is still being processed. Retry later with the same key and the same payload.',
      retryable: true,
    },
    'idempotency-store-unavailable': {
      status: 503,
      title: 'Idempotency store unavailable',
      detail:
        'The idempotency store could not be reached to check this Idempotency-Key or to record the outcome. Retry later with the same key and the same payload: the retry answers with the outcome of this request, and never processes it twice.',
      retryable: true,
    },
    'idempotency-replay-unavailable': {
      status: 409,
      title: 'Original response cannot be replayed',
      detail:
        'The request with this Idempotency-Key was completed, but its response could not be stored (too large, streamed, or never rendered). Do not retry: look the result up instead.',
      retryable: false,
    },
    'idempotency-outcome-unknown': {
      status: 500,
      title: 'Outcome of the original request is unknown',
      detail:
        'The original request with this Idempotency-Key stopped before it finished, and whether it took effect is unknown. Check the resource before you send a new request with a new key.',
      retryable: false,
    },
    'idempotency-scope-unresolved': {
      status: 500,
      title: 'Idempotency scope cannot be resolved',
      detail:
        'The server could not determine whom this Idempotency-Key belongs to. This is a server configuration error.',
      retryable: false,
    },
    'idempotency-request-too-large': {
      status: 413,
      title: 'Request too large for an Idempotency-Key',
      detail:
        'The request body is larger than this operation accepts with an Idempotency-Key. It was not processed; send a smaller request.',
      retryable: false,
    },
    'idempotency-record-unreadable': {
      status: 500,
      title: 'Idempotency record cannot be read',
      detail:
        'A request with this Idempotency-Key was already processed, but its stored result cannot be read. It is neither replayed nor processed again. This is a server error.',
      retryable: false,
    },
  };

/**
 * The problem body of `kind`, with the `type` URI under `baseUri` (which ends with '/'). Every
 * body says whether to retry (`retryable`); a retryable one with a `Retry-After` also carries
 * it as `retryAfter` (seconds), for clients that read the body and not the headers.
 */
export function buildProblem(
  kind: IdempotencyProblemKind,
  baseUri: string,
  overrides: { status?: number; retryAfterSeconds?: number; extensions?: Record<string, unknown> } = {},
): ProblemDetails {
  const def = PROBLEMS[kind];
  const problem: ProblemDetails = {
    type: `${baseUri}${kind}`,
    title: def.title,
    status: overrides.status ?? def.status,
    detail: def.detail,
    ...overrides.extensions,
    code: kind.replaceAll('-', '_'),
    retryable: def.retryable,
  };
  if (overrides.retryAfterSeconds !== undefined) problem.retryAfter = overrides.retryAfterSeconds;
  return problem;
}

/**
 * Every error the idempotency layer answers itself. Its response is the problem body, and
 * `headers` are the ones the response must carry (`Retry-After`, the key echo, ...);
 * `IdempotencyProblemFilter` writes both with `Content-Type: application/problem+json`.
 *
 * @publicApi
 */
export class IdempotencyProblemException extends HttpException {
  constructor(
    readonly problem: ProblemDetails,
    readonly headers: Readonly<Record<string, string>>,
  ) {
    super(problem, problem.status, { errorCode: problem.code });
  }

  get kind(): IdempotencyProblemKind {
    return this.problem.code.replaceAll('_', '-') as IdempotencyProblemKind;
  }
}
