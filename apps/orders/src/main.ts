import type { AddressInfo } from 'node:net';
import { Logger } from '@nestjs/common';
import { createOrdersApp } from './app.factory.js';
import { OrdersConfigError, parseOrdersConfig } from './config/orders.config.js';

async function bootstrap(): Promise<void> {
  let config;
  try {
    config = parseOrdersConfig(process.env);
  } catch (error) {
    if (error instanceof OrdersConfigError) {
      console.error(error.message);
      process.exit(1);
    }
    throw error;
  }
  const app = await createOrdersApp({ config });
  // SIGTERM / SIGINT close the HTTP server, the database and Redis, then exit 0 (1 if closing failed).
  app.enableShutdownHooks(['SIGTERM', 'SIGINT'], { useProcessExit: true });
  await app.listen(config.port, config.host);
  const { port } = app.getHttpServer().address() as AddressInfo;
  new Logger('OrdersApp').log(`Orders service listening on http://${config.host}:${port}`);
}

bootstrap().catch((error: unknown) => {
  new Logger('OrdersApp').fatal(`Could not start: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
