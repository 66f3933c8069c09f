import { type FactoryProvider, RequestMethod } from '@nestjs/common';
import { HTTP_CODE_METADATA, METHOD_METADATA } from '@nestjs/common/constants.js';
import type { IdempotentOptions } from '../interfaces/idempotency-module-options.interface.js';
import { IDEMPOTENCY_KEY_HEADER } from '../idempotency.constants.js';

type Swagger = Pick<typeof import('@nestjs/swagger'), 'ApiHeader' | 'ApiResponse' | 'DECORATORS'>;

/**
 * The module `specifier`, or undefined when it is not installed (an optional peer). Any other
 * failure to load it is a broken install and is thrown. The published build is CommonJS and loads
 * it with `require()`: Jest's CommonJS runtime (a Nest 11 app's tests) has no `import()`. The same
 * source run as an ES module (the repository's tests) has no `require` and uses `import()`. @internal
 */
export async function importOptional<T>(specifier: string): Promise<T | undefined> {
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- the CommonJS build's loader, see above
    return typeof require === 'function' ? (require(specifier) as T) : ((await import(specifier)) as T);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    const missing =
      (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') && String(error).includes(specifier);
    if (missing) return undefined;
    throw error;
  }
}

/**
 * `@nestjs/swagger` when the application has it. Loaded by `importOptional()`, never awaited at the
 * top level: a top-level `await` anywhere in the graph would stop CommonJS applications from
 * `require()`-ing the library (ERR_REQUIRE_ASYNC_MODULE). The decorators wait for it instead (see
 * `idempotencyApiDocs`).
 */
const swaggerLoading: Promise<Swagger | undefined> = importOptional<Swagger>('@nestjs/swagger');
// A broken install is reported by whenApiDocsApplied(), which the module awaits at startup.
swaggerLoading.catch(() => undefined);

/**
 * Resolves once every `@Idempotent()` route declared so far carries its OpenAPI decorators;
 * rejects when `@nestjs/swagger` is installed but fails to load. `IdempotencyModule` awaits it
 * while the application is created, so documents built afterwards see the decorators. @internal
 */
export function whenApiDocsApplied(): Promise<void> {
  // Reactions run in the order they were registered: every pending decoration runs first.
  return swaggerLoading.then(() => undefined);
}

/** Makes the application's creation wait for `whenApiDocsApplied()`. @internal */
export const apiDocsProvider: FactoryProvider<void> = {
  provide: Symbol('idempotency:api-docs-applied'),
  useFactory: whenApiDocsApplied,
};

/** The RFC 9457 body of every problem the idempotency layer answers (docs/contract.md B.11). */
const PROBLEM_SCHEMA = {
  type: 'object',
  required: ['type', 'title', 'status', 'retryable'] as string[],
  properties: {
    type: { type: 'string', format: 'uri', description: 'One URI per problem kind (`problemTypeBaseUri` + slug).' },
    title: { type: 'string' },
    status: { type: 'integer' },
    detail: { type: 'string' },
    code: { type: 'string', description: 'Stable snake_case id, e.g. `idempotency_key_reused`.' },
    retryable: {
      type: 'boolean',
      description:
        'Whether the same request with the same key may be sent again: true for `409` in progress and `503`, false for every other problem.',
    },
    retryAfter: {
      type: 'integer',
      description: 'Seconds to wait before retrying, the same as the `Retry-After` header (retryable problems only).',
    },
  },
};

const DEFAULT_MAX_KEY_LENGTH = 255;

/**
 * The OpenAPI decorators `@Idempotent()` adds when `@nestjs/swagger` is installed: the
 * `Idempotency-Key` header (required when the route says so) and the problem responses the
 * layer can answer (400, 409, the mismatch status, 503), merged with the route's own responses
 * of the same status. Swagger drops a route's implicit success response once any response is
 * declared, so it is declared too when the route declares no 2xx itself. Nothing without Swagger.
 *
 * They are applied once Swagger has loaded, which is always after the class is defined: by then
 * `@Post()` and `@HttpCode()` (usually above `@Idempotent()`, so applied after it) are readable.
 */
export function idempotencyApiDocs(options: IdempotentOptions): MethodDecorator & ClassDecorator {
  return ((target: object, key?: string | symbol, descriptor?: PropertyDescriptor) => {
    void swaggerLoading.then(
      (swagger) => {
        if (!swagger) return;
        for (const decorate of apiDocsDecorators(swagger, options)) decorate(target, key!, descriptor!);
      },
      () => undefined,
    );
  }) as MethodDecorator & ClassDecorator;
}

function apiDocsDecorators(swagger: Swagger, options: IdempotentOptions): Array<MethodDecorator & ClassDecorator> {
  const required = options.required === true;
  const maxLength = options.maxKeyLength ?? DEFAULT_MAX_KEY_LENGTH;
  const mismatchStatus = options.mismatchStatus ?? 422;
  const responses = new Map<number, string[]>([
    [400, [required ? 'Idempotency-Key is missing or invalid.' : 'Idempotency-Key is invalid.']],
    [
      409,
      [
        'A request with this Idempotency-Key is still in progress (retry after `Retry-After` seconds), or its response cannot be replayed.',
      ],
    ],
    [503, ['The idempotency store is unavailable; retry after `Retry-After` seconds.']],
  ]);
  const mismatch = 'This Idempotency-Key was already used with a different request payload.';
  responses.set(mismatchStatus, [...(responses.get(mismatchStatus) ?? []), mismatch]);
  return [
    swagger.ApiHeader({
      name: IDEMPOTENCY_KEY_HEADER,
      required,
      description:
        'A unique value per operation, generated by the client (a UUID v4 is recommended), reused unchanged on every ' +
        `retry of the same request (at most ${maxLength} characters). ` +
        (required ? 'Required on this route.' : 'Optional: without it the request is not deduplicated.'),
      schema: { type: 'string', maxLength },
    }),
    ...[...responses].map(([status, descriptions]) =>
      swagger.ApiResponse({
        status,
        description: descriptions.join(' Or: '),
        content: { 'application/problem+json': { schema: PROBLEM_SCHEMA } },
      }),
    ),
    keepSuccessResponse(swagger),
  ];
}

/** Declares the route's default success status (201 for POST, else 200, or its `@HttpCode()`) unless it declares a 2xx. */
function keepSuccessResponse(sw: Swagger): MethodDecorator & ClassDecorator {
  return ((target: object, key?: string | symbol, descriptor?: PropertyDescriptor) => {
    if (!descriptor || key === undefined) return;
    const handler = descriptor.value as object;
    const responses = (Reflect.getMetadata(sw.DECORATORS.API_RESPONSE, handler) ?? {}) as Record<string, unknown>;
    if (Object.keys(responses).some((status) => status.startsWith('2'))) return;
    const status =
      (Reflect.getMetadata(HTTP_CODE_METADATA, handler) as number | undefined) ??
      (Reflect.getMetadata(METHOD_METADATA, handler) === RequestMethod.POST ? 201 : 200);
    sw.ApiResponse({ status, description: '' })(target, key, descriptor);
  }) as MethodDecorator & ClassDecorator;
}
