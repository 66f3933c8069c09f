import { Logger, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { IDEMPOTENCY_CORS } from 'nestjs-idempotency';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { AppModule } from './app.module.js';
import { describeBackends, logLevelsFrom, type OrdersConfig, parseOrdersConfig } from './config/orders.config.js';
import { orderEventsRmqTransport } from './events/order-events.rabbitmq.js';
import { serveOpenApi } from './openapi.js';

/** Response headers a browser may read: `Location` and the idempotency layer's own. */
export const CORS_EXPOSED_HEADERS = [...new Set(['Location', ...IDEMPOTENCY_CORS.exposedHeaders])];

export interface CreateOrdersAppOptions {
  /** A ready configuration; by default it is parsed from `env`. */
  config?: OrdersConfig;
  /** @default process.env */
  env?: NodeJS.ProcessEnv;
  /** A logger to use instead of Nest's console logger at the configured level (`false`: silent). */
  logger?: LoggerService | false;
}

/**
 * Builds the orders app (connects the database, runs the migrations) without listening, so the
 * e2e suites can boot the real module in-process and `main.ts` can boot it as a process.
 * Throws `OrdersConfigError` on bad configuration.
 */
export async function createOrdersApp(options: CreateOrdersAppOptions = {}): Promise<NestExpressApplication> {
  const config = options.config ?? parseOrdersConfig(options.env ?? process.env);
  const app = await NestFactory.create<NestExpressApplication>(AppModule.forRoot(config), {
    // The idempotency layer fingerprints the request's exact bytes.
    rawBody: true,
    logger: options.logger ?? logLevelsFrom(config.logLevel),
    // Throw instead of exiting, so callers (and tests) see the error.
    abortOnError: false,
  });
  app.disable('x-powered-by');
  // Any JSON value parses (`"text"`, `[]`, `null` too), so a body that is valid JSON but not an
  // object gets a `validation-error` from the pipe; only malformed JSON is `invalid-json`.
  app.useBodyParser('json', { strict: false });
  // Without `allowedHeaders`, preflights allow the headers they ask for, Idempotency-Key included.
  app.enableCors({ exposedHeaders: CORS_EXPOSED_HEADERS });
  serveOpenApi(app);
  new Logger('OrdersApp').log(describeBackends(config));
  if (config.rabbitmq && config.queue.worker) {
    // Consumes order.created from RabbitMQ in this process (QUEUE_WORKER=false leaves it to workers).
    app.connectMicroservice(orderEventsRmqTransport(config.rabbitmq), { inheritAppConfig: true });
    await app.startAllMicroservices();
  }
  return app;
}
