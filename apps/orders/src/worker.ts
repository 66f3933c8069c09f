import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';
import { redactUrl } from './config/redact-url.js';
import { loadOrdersConfig } from './config/orders-config.module.js';
import { logLevelsFrom } from './config/orders.config.js';
import { OrdersConfigError } from './config/orders.environment.js';
import { orderEventsRmqTransport } from './events/order-events.rabbitmq.js';

/**
 * A worker process: the orders service without HTTP, consuming the `order-events` queue (and
 * relaying the outbox). Run as many as you like next to the API processes, which can then be
 * started with `QUEUE_WORKER=false`. Needs `RABBITMQ_URL` (the queue on RabbitMQ) or `REDIS_URL`
 * (BullMQ): without either there is no queue, and the API process handles events in-process.
 */
async function bootstrap(): Promise<void> {
  let loaded;
  try {
    // A worker consumes the queue whatever QUEUE_WORKER says.
    loaded = await loadOrdersConfig({ ...process.env, QUEUE_WORKER: 'true' });
  } catch (error) {
    if (error instanceof OrdersConfigError) {
      console.error(error.message);
      process.exit(1);
    }
    throw error;
  }
  const { config } = loaded;
  const { rabbitmq } = config.queue;
  if (rabbitmq) {
    const app = await NestFactory.createMicroservice(AppModule.forRoot(loaded), {
      ...orderEventsRmqTransport(rabbitmq),
      logger: logLevelsFrom(config.log.level),
      abortOnError: false,
    });
    app.enableShutdownHooks(['SIGTERM', 'SIGINT'], { useProcessExit: true });
    await app.listen();
    new Logger('OrdersWorker').log(
      `Orders worker ready (queue "${rabbitmq.queue}" on RabbitMQ ${redactUrl(rabbitmq.url)})`,
    );
    return;
  }
  if (config.fastStore.kind !== 'redis') {
    console.error(
      'The worker consumes the order-events queue on RabbitMQ or Redis: set RABBITMQ_URL or REDIS_URL. (Without either, the API process handles events itself.)',
    );
    process.exit(1);
  }
  const app = await NestFactory.createApplicationContext(AppModule.forRoot(loaded), {
    logger: logLevelsFrom(config.log.level),
    abortOnError: false,
  });
  // SIGTERM / SIGINT: the worker finishes its active jobs, closes its connections, exits 0.
  app.enableShutdownHooks(['SIGTERM', 'SIGINT'], { useProcessExit: true });
  await app.init();
  new Logger('OrdersWorker').log(`Orders worker ready (queue "order-events" on ${redactUrl(config.fastStore.url)})`);
}

bootstrap().catch((error: unknown) => {
  new Logger('OrdersWorker').fatal(`Could not start: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
