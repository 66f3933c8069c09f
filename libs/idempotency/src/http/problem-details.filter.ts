import { Catch, Injectable, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { PROBLEM_CONTENT_TYPE } from '../idempotency.constants.js';
import { IdempotencyProblemException } from '../errors/idempotency.exceptions.js';

/**
 * Writes the library's own errors as RFC 9457 problems with their headers. `@Idempotent()`
 * binds it to the route, where it takes precedence over the application's global filters, so
 * the contract's bodies and headers reach the client unchanged.
 */
@Catch(IdempotencyProblemException)
@Injectable()
export class IdempotencyProblemFilter implements ExceptionFilter<IdempotencyProblemException> {
  constructor(private readonly adapterHost: HttpAdapterHost) {}

  catch(exception: IdempotencyProblemException, host: ArgumentsHost): void {
    const response = host.switchToHttp().getResponse();
    const adapter = this.adapterHost.httpAdapter;
    for (const [name, value] of Object.entries(exception.headers)) adapter.setHeader(response, name, value);
    adapter.setHeader(response, 'Content-Type', PROBLEM_CONTENT_TYPE);
    adapter.reply(response, JSON.stringify(exception.problem), exception.getStatus());
  }
}
