import type { INestApplication, LoggerService } from '@nestjs/common';
import { createOrdersApp } from '../../../apps/orders/src/app.factory.js';

/** The orders app listening on a free loopback port, and its base URL. Close it with `app.close()`. */
export async function startOrdersApp(
  env: NodeJS.ProcessEnv,
  logger: LoggerService | false = false,
): Promise<{ app: INestApplication; url: string }> {
  const app = await createOrdersApp({ env, logger });
  await app.listen(0, '127.0.0.1');
  return { app, url: (await app.getUrl()).replace('[::1]', '127.0.0.1') };
}
