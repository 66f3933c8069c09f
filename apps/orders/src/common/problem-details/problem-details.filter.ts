import { type ArgumentsHost, Catch, type ExceptionFilter, Logger } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { InjectOrdersConfig, type OrdersConfig } from '../../config/orders.config.js';
import { PROBLEM_CONTENT_TYPE, toProblemResponse } from './problem-details.js';

/**
 * Turns every error of the HTTP layer, including the router's 404 and the body parser's 400,
 * into an RFC 9457 problem details response. Headers already set on the response (the
 * idempotency layer sets `Retry-After`, `Idempotency-Key`, `Cache-Control`, `Content-Language`)
 * are kept; only `Content-Type` is set here.
 */
@Catch()
export class ProblemDetailsFilter implements ExceptionFilter {
  private readonly logger = new Logger('ProblemDetails');

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    @InjectOrdersConfig('problems') private readonly problems: OrdersConfig['problems'],
  ) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    if (host.getType() !== 'http') {
      // A message consumer (RabbitMQ): its settlement already acknowledged, retried or dead-lettered the message.
      this.logger.error(
        `${host.getType()} handler failed`,
        exception instanceof Error ? exception.stack : String(exception),
      );
      return;
    }
    const { httpAdapter } = this.adapterHost;
    const ctx = host.switchToHttp();
    const request = ctx.getRequest<unknown>();
    const response = ctx.getResponse<unknown>();
    const { status, body, unexpected } = toProblemResponse(exception, this.problems.typeBaseUri);
    const route = `${httpAdapter.getRequestMethod(request)} ${httpAdapter.getRequestUrl(request)}`;

    if (unexpected) {
      this.logger.error(`${route} failed`, exception instanceof Error ? exception.stack : String(exception));
    } else if (status >= 500) {
      this.logger.warn(`${route} answered ${status} ${body.type}`);
    }

    if (httpAdapter.isHeadersSent(response)) {
      // Too late for a problem body: end the response so the client is not left waiting.
      httpAdapter.end(response);
      return;
    }
    httpAdapter.setHeader(response, 'Content-Type', PROBLEM_CONTENT_TYPE);
    httpAdapter.reply(response, body, status);
  }
}
