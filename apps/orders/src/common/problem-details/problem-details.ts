import { STATUS_CODES } from 'node:http';
import { HttpException, HttpStatus } from '@nestjs/common';

/**
 * RFC 9457 problem details: the only error body this service sends.
 * `type`, `title` and `status` are fixed per problem kind; `code` is a stable snake_case id
 * (docs/contract.md B.11); anything else is an extension member.
 */
export interface ProblemDetails {
  type: string;
  title: string;
  status: number;
  detail?: string;
  code?: string;
  [extension: string]: unknown;
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** One invalid request field in a `validation-error` problem (`items.0.quantity`). */
export interface FieldError {
  field: string;
  messages: string[];
}

/**
 * The problem kinds of the orders service. `type` is the base URI plus the slug.
 * The idempotency library brings its own kinds (docs/contract.md B.11) as ready-made bodies.
 */
export const ORDERS_PROBLEMS = {
  validation: { slug: 'validation-error', title: 'Request validation failed', status: 400, code: 'validation_error' },
  invalidJson: { slug: 'invalid-json', title: 'Request body is not valid JSON', status: 400, code: 'invalid_json' },
  tenantRequired: {
    slug: 'tenant-required',
    title: 'X-Tenant-ID header is missing',
    status: 400,
    code: 'tenant_required',
  },
  tenantInvalid: {
    slug: 'tenant-invalid',
    title: 'X-Tenant-ID header is invalid',
    status: 400,
    code: 'tenant_invalid',
  },
  notFound: { slug: 'not-found', title: 'Resource not found', status: 404, code: 'not_found' },
  paymentKeyReused: {
    slug: 'payment-key-reused',
    title: 'Payment provider key is already used',
    status: 409,
    code: 'payment_key_reused',
  },
  webhookSignatureInvalid: {
    slug: 'webhook-signature-invalid',
    title: 'Webhook signature is missing or invalid',
    status: 401,
    code: 'webhook_signature_invalid',
  },
  webhookEventReused: {
    slug: 'webhook-event-reused',
    title: 'Webhook event id is already used',
    status: 422,
    code: 'webhook_event_reused',
  },
  webhookEventInProgress: {
    slug: 'webhook-event-in-progress',
    title: 'Webhook event is being processed',
    status: 409,
    code: 'webhook_event_in_progress',
  },
  webhooksDisabled: {
    slug: 'webhooks-disabled',
    title: 'Webhooks are not configured',
    status: 503,
    code: 'webhooks_disabled',
  },
  storeUnavailable: {
    slug: 'store-unavailable',
    title: 'Service unavailable',
    status: 503,
    code: 'store_unavailable',
  },
  adminUnauthorized: {
    slug: 'admin-unauthorized',
    title: 'Admin token is missing or invalid',
    status: 401,
    code: 'admin_unauthorized',
  },
  healthCheckFailed: {
    slug: 'health-check-failed',
    title: 'Service unavailable',
    status: 503,
    code: 'health_check_failed',
  },
  internal: { slug: 'internal-error', title: 'Internal server error', status: 500, code: 'internal_error' },
} as const;

export type OrdersProblemKind = keyof typeof ORDERS_PROBLEMS;

/**
 * An HTTP error whose response is already a complete problem body. The filter sends it as is.
 * Code that has no access to the configured base URI throws this with a kind and lets the
 * filter resolve `type` (see {@link resolveProblemType}).
 */
export class ProblemException extends HttpException {
  constructor(
    readonly kind: OrdersProblemKind,
    detail: string,
    extensions: Record<string, unknown> = {},
  ) {
    const { title, status, code } = ORDERS_PROBLEMS[kind];
    // `type` is a slug until the filter prefixes the configured base URI.
    super({ type: ORDERS_PROBLEMS[kind].slug, title, status, detail, code, ...extensions }, status, {
      errorCode: code,
    });
  }
}

/** Does `value` look like a complete problem body (type, title and a numeric status)? */
export function isProblemDetails(value: unknown): value is ProblemDetails {
  if (typeof value !== 'object' || value === null) {
    return false;
  }
  const v = value as Record<string, unknown>;
  return typeof v.type === 'string' && typeof v.title === 'string' && typeof v.status === 'number';
}

/** The public outcome of mapping an error: what to send, and whether it is a server fault to log. */
export interface ProblemResponse {
  status: number;
  body: ProblemDetails;
  /** True for 5xx answers that did not come from a deliberate HttpException: log the cause. */
  unexpected: boolean;
}

/**
 * Maps anything thrown by a handler, guard, pipe or the router to a problem response.
 * Pure: the filter does the I/O. Rules, in order:
 * 1. a {@link ProblemException}: its body, `type` prefixed with the base URI;
 * 2. another HttpException whose response already is a problem body (the idempotency
 *    library's): sent unchanged with the exception's status;
 * 3. a malformed-JSON 400 from the body parser: `invalid-json`;
 * 4. a 404 from the router or any other NotFoundException: `not-found`;
 * 5. any other HttpException: `about:blank` with the status phrase as title and its message as detail;
 * 6. anything else: `internal-error` 500, with no detail about the cause.
 */
export function toProblemResponse(exception: unknown, problemTypeBaseUri: string): ProblemResponse {
  const make = (kind: OrdersProblemKind, detail: string): ProblemResponse => {
    const p = ORDERS_PROBLEMS[kind];
    return {
      status: p.status,
      body: { type: problemTypeBaseUri + p.slug, title: p.title, status: p.status, detail, code: p.code },
      unexpected: kind === 'internal',
    };
  };

  if (exception instanceof ProblemException) {
    const body = exception.getResponse() as ProblemDetails;
    return {
      status: exception.getStatus(),
      body: { ...body, type: problemTypeBaseUri + body.type },
      unexpected: false,
    };
  }
  if (!(exception instanceof HttpException)) {
    return make('internal', 'An unexpected error occurred. It has been logged.');
  }

  const status = exception.getStatus();
  const response = exception.getResponse();
  if (isProblemDetails(response)) {
    return { status, body: response, unexpected: false };
  }
  if (status === HttpStatus.BAD_REQUEST && isBodyParseError(exception.cause)) {
    return make('invalidJson', 'The request body could not be parsed as JSON.');
  }
  const message = messageOf(response) ?? exception.message;
  if (status === HttpStatus.NOT_FOUND) {
    return make('notFound', message);
  }
  return {
    status,
    body: { type: 'about:blank', title: STATUS_CODES[status] ?? 'Error', status, detail: message },
    unexpected: false,
  };
}

function isBodyParseError(cause: unknown): boolean {
  return (
    cause instanceof SyntaxError &&
    ((cause as SyntaxError & { type?: string }).type === 'entity.parse.failed' || 'body' in cause)
  );
}

function messageOf(response: string | object): string | undefined {
  if (typeof response === 'string') {
    return response;
  }
  const message = (response as { message?: unknown }).message;
  if (typeof message === 'string') {
    return message;
  }
  if (Array.isArray(message)) {
    return message.map(String).join('; ');
  }
  return undefined;
}
