/**
 * What of an HTTP request goes into its fingerprint (docs/contract.md B.4): the body as the
 * fingerprint can see it, the request's parts as `computeFingerprint()` takes them, or a route's
 * own fingerprint function.
 */
import type { Logger } from '@nestjs/common';
import { createHash } from 'node:crypto';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import type { ResolvedPolicy } from '../idempotency.options.js';
import type { IdempotencyHttpRequest } from '../interfaces/idempotency-module-options.interface.js';
import type { FingerprintInput, ParsedRequestBody } from './fingerprint/fingerprint.js';
import { firstHeader, routeTemplateOf, type HttpRequest } from './http-request.js';
import { readVisibleBody, RequestBodyNotVisibleError, type BodyCarrier, type VisibleBody } from './request-body.js';
import type { ResolvedScope } from './request-scope.js';
import { UnreadBodyTooLargeError } from './unread-body.js';
import { UploadedFileNotVisibleError } from './uploaded-files.js';

/** The built-in fingerprint's settings: the route's `fingerprint` option when it is not a function. */
export type BuiltInFingerprint = Exclude<ResolvedPolicy['fingerprint'], (request: IdempotencyHttpRequest) => unknown>;

/** What the fingerprint sees of the body: its raw bytes, or what the layers before parsed. */
export interface FingerprintedBody {
  bytes?: Buffer;
  parsed?: ParsedRequestBody;
}

/** The route's custom function (rule 16), with the dimensions left out of the scope compared too (rule 12a). */
export function customFingerprint(
  fingerprint: (request: IdempotencyHttpRequest) => string | Buffer,
  request: HttpRequest,
  scope: ResolvedScope,
): string {
  return createHash('sha256')
    .update(JSON.stringify(scope.fingerprintExtras))
    .update('\n')
    .update(fingerprint(request))
    .digest('base64url');
}

/** The request's parts as the built-in fingerprint takes them. */
export function fingerprintInputOf(
  request: HttpRequest,
  option: BuiltInFingerprint,
  scope: ResolvedScope,
  body: FingerprintedBody,
): FingerprintInput {
  const url = request.originalUrl ?? request.raw?.url ?? request.url ?? '';
  const queryAt = url.indexOf('?');
  const contentType = firstHeader(request.headers['content-type']);
  return {
    method: request.method.toUpperCase(),
    routeTemplate: routeTemplateOf(request),
    pathParams: { ...request.params },
    query: queryAt < 0 ? '' : url.slice(queryAt + 1),
    contentType,
    body: body.bytes,
    parsedBody: body.parsed,
    headers: (option.headers ?? []).map((name) => [name, firstHeader(request.headers[name]) ?? ''] as [string, string]),
    extra: scope.fingerprintExtras,
    json: option.json,
  };
}

/**
 * What the fingerprint sees of the body (docs/contract.md B.4 rule 15): the raw bytes where they can
 * be had (kept by the platform, or read here before any other layer and put back), else what
 * an upload interceptor or the platform parsed. A body it cannot see fails the request with a
 * configuration error instead of being fingerprinted in part.
 */
export class FingerprintBodyReader {
  private warnedNoRawBody = false;

  constructor(private readonly logger: Logger) {}

  /** `tooLarge` is the error thrown when an unread body outgrows `maxFingerprintedBodyBytes`. */
  async read(
    request: HttpRequest,
    policy: ResolvedPolicy,
    operation: string,
    tooLarge: () => Error,
  ): Promise<FingerprintedBody> {
    let visible: VisibleBody;
    try {
      visible = await readVisibleBody(request as unknown as BodyCarrier, policy.maxFingerprintedBodyBytes);
    } catch (error) {
      if (error instanceof UnreadBodyTooLargeError) throw tooLarge();
      if (!(error instanceof RequestBodyNotVisibleError || error instanceof UploadedFileNotVisibleError)) throw error;
      const message =
        `@Idempotent() ${operation}: the request body cannot be fingerprinted: ${error.message}. ` +
        "Let the idempotency interceptor read the body first (write @Idempotent() below that layer's @UseInterceptors()), " +
        'create the app with NestFactory.create(AppModule, { rawBody: true }), store uploads in memory or on disk, ' +
        'or give the route a fingerprint function.';
      this.logger.error(message);
      throw new IdempotencyConfigurationError(message);
    }
    if (visible.source === 'parsed' && !this.warnedNoRawBody) {
      this.warnedNoRawBody = true;
      this.logger.warn(
        'request.rawBody is missing: fingerprints fall back to the parsed body, which loses number spelling (1 vs 1.0). Create the app with NestFactory.create(AppModule, { rawBody: true }).',
      );
    }
    return { bytes: visible.bytes, parsed: visible.parsed };
  }
}
