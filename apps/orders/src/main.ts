import type { AddressInfo } from 'node:net';
import { Logger } from '@nestjs/common';
import { ConfigService } from '@nestjs/config';
import { createOrdersApp } from './app.factory.js';
import type { OrdersConfig } from './config/orders.config.js';
import { OrdersConfigError } from './config/orders.environment.js';

async function bootstrap(): Promise<void> {
  let app;
  try {
    app = await createOrdersApp();
  } catch (error) {
    if (error instanceof OrdersConfigError) {
      console.error(error.message);
      process.exit(1);
    }
    throw error;
  }
  // SIGTERM / SIGINT close the HTTP server, the database and Redis, then exit 0 (1 if closing failed).
  app.enableShutdownHooks(['SIGTERM', 'SIGINT'], { useProcessExit: true });
  const { host, port } = app.get<ConfigService<OrdersConfig, true>>(ConfigService).get('http', { infer: true });
  await app.listen(port, host);
  const { port: listening } = app.getHttpServer().address() as AddressInfo;
  new Logger('OrdersApp').log(`Orders service listening on http://${host}:${listening}`);
}

bootstrap().catch((error: unknown) => {
  new Logger('OrdersApp').fatal(`Could not start: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
