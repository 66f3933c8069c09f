import type { INestApplication, LoggerService } from '@nestjs/common';
import { createOrdersApp } from '../../../apps/orders/src/app.factory.js';
import type { Backend } from './backends.js';

/** The orders app listening on a free loopback port, and its base URL. Close it with `app.close()`. */
export async function startOrdersApp(
  env: NodeJS.ProcessEnv,
  logger: LoggerService | false = false,
): Promise<{ app: INestApplication; url: string }> {
  const app = await createOrdersApp({ env, logger });
  await app.listen(0, '127.0.0.1');
  return { app, url: (await app.getUrl()).replace('[::1]', '127.0.0.1') };
}

/**
 * Registers `beforeAll` / `afterAll` hooks that set up `backend`, start the app on it with
 * `env` added, and tear both down. Read `app` and `url` inside tests.
 */
export function useOrdersApp(
  backend: () => Promise<Backend>,
  env: NodeJS.ProcessEnv = {},
  logger: LoggerService | false = false,
): { readonly app: INestApplication; readonly url: string } {
  const state = {} as { app: INestApplication; url: string; backend?: Backend };
  beforeAll(async () => {
    state.backend = await backend();
    Object.assign(state, await startOrdersApp({ ...state.backend.env, ...env }, logger));
  });
  afterAll(async () => {
    await state.app?.close();
    await state.backend?.tearDown();
  });
  return state;
}
