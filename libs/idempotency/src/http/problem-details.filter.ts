import { Catch, Inject, Injectable, Optional, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { DEFAULT_PROBLEM_TYPE_BASE_URI, PROBLEM_CONTENT_TYPE } from '../idempotency.constants.js';
import { IdempotencyProblemException } from '../errors/idempotency.exceptions.js';
import { IdempotencyRunError } from '../errors/idempotency-run.error.js';
import type { ResolvedModuleSettings } from '../idempotency.options.js';
import { IDEMPOTENCY_SETTINGS } from '../idempotency.tokens.js';
import { runErrorResponse } from './run-error-problems.js';

/**
 * Writes the library's own errors as RFC 9457 problems with their headers. `@Idempotent()`
 * binds it to the route, where it takes precedence over the application's global filters, so
 * the contract's bodies and headers reach the client unchanged.
 *
 * It also answers what `IdempotencyService.run()` throws when a controller calls it
 * (`IdempotencyRunError`): `key-reused` → 422, `in-progress` → 409 with `Retry-After`,
 * `replay-unavailable` → 409, `outcome-unknown` → 500, the interceptor's problems; a
 * `replayed-failure` answers the stored failure again. Bind it where `run()` is called from HTTP:
 * on the controller, or for the whole application.
 *
 * @example
 * @Controller('transfers')
 * @UseFilters(IdempotencyProblemFilter)
 * class TransfersController { ... idempotency.run({ operation: 'transfers.create', key }, () => ...) ... }
 * @example
 * app.useGlobalFilters(app.get(IdempotencyProblemFilter));
 * @publicApi
 */
@Catch(IdempotencyProblemException, IdempotencyRunError)
@Injectable()
export class IdempotencyProblemFilter implements ExceptionFilter<IdempotencyProblemException | IdempotencyRunError> {
  constructor(
    private readonly adapterHost: HttpAdapterHost,
    @Optional() @Inject(IDEMPOTENCY_SETTINGS) private readonly settings?: ResolvedModuleSettings,
  ) {}

  catch(exception: IdempotencyProblemException | IdempotencyRunError, host: ArgumentsHost): void {
    const response = host.switchToHttp().getResponse();
    const adapter = this.adapterHost.httpAdapter;
    if (exception instanceof IdempotencyRunError) {
      const settings = this.settings ?? { problemTypeBaseUri: DEFAULT_PROBLEM_TYPE_BASE_URI, problemLanguage: 'en' };
      const reply = runErrorResponse(exception, settings);
      for (const [name, value] of Object.entries(reply.headers)) adapter.setHeader(response, name, value);
      adapter.reply(response, reply.body.toString('utf8'), reply.statusCode);
      return;
    }
    for (const [name, value] of Object.entries(exception.headers)) adapter.setHeader(response, name, value);
    adapter.setHeader(response, 'Content-Type', PROBLEM_CONTENT_TYPE);
    adapter.reply(response, JSON.stringify(exception.problem), exception.getStatus());
  }
}
