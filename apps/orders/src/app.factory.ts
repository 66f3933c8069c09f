import { Logger, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { IDEMPOTENCY_CORS } from 'nestjs-idempotency';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { AppModule } from './app.module.js';
import { loadOrdersConfig } from './config/orders-config.module.js';
import { describeBackends, logLevelsFrom } from './config/orders.config.js';
import type { EnvironmentVariables } from './config/orders.environment.js';
import { orderEventsRmqTransport } from './events/order-events.rabbitmq.js';
import { serveOpenApi } from './openapi.js';

/** Response headers a browser may read: `Location` and the idempotency layer's own. */
export const CORS_EXPOSED_HEADERS = [...new Set(['Location', ...IDEMPOTENCY_CORS.exposedHeaders])];

export interface CreateOrdersAppOptions {
  /** The variables to read instead of `process.env` (which is then neither read nor changed). */
  env?: EnvironmentVariables;
  /** A logger to use instead of Nest's console logger at the configured level (`false`: silent). */
  logger?: LoggerService | false;
}

/**
 * Builds the orders app (connects the database, runs the migrations) without listening, so the
 * e2e suites can boot the real module in-process and `main.ts` can boot it as a process.
 * Throws `OrdersConfigError` on bad configuration.
 */
export async function createOrdersApp(options: CreateOrdersAppOptions = {}): Promise<NestExpressApplication> {
  const loaded = await loadOrdersConfig(options.env);
  const { config } = loaded;
  const app = await NestFactory.create<NestExpressApplication>(AppModule.forRoot(loaded), {
    // The idempotency layer fingerprints the request's exact bytes.
    rawBody: true,
    logger: options.logger ?? logLevelsFrom(config.log.level),
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
  const { rabbitmq, worker } = config.queue;
  if (rabbitmq && worker) {
    // Consumes order.created from RabbitMQ in this process (QUEUE_WORKER=false leaves it to workers).
    app.connectMicroservice(orderEventsRmqTransport(rabbitmq), { inheritAppConfig: true });
    await app.startAllMicroservices();
  }
  return app;
}
