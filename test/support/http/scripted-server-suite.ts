import type { IdempotentClientOptions } from 'nestjs-idempotency/client';
import { fakeTime } from '../fake-time.js';
import { startScriptedServer, type ScriptedServer } from './scripted-server.js';

/**
 * A scripted server for the whole describe block and a fresh fake clock for each test, with
 * client options on that clock: what the client suites share.
 */
export function scriptedServerSuite() {
  const suite = {
    server: undefined as unknown as ScriptedServer,
    time: fakeTime(),
    /** The Idempotency-Key of each request the server received, in order. */
    keysSent: () => suite.server.received.map((request) => request.headers['idempotency-key']),
    /** Client options on the fake clock (read when called), a fixed jitter of 0.5 and no budget. */
    options: (extra: IdempotentClientOptions = {}): IdempotentClientOptions => ({
      now: () => suite.time.now(),
      sleep: (ms, signal) => suite.time.sleep(ms, signal),
      random: () => 0.5,
      retryBudget: false,
      ...extra,
    }),
  };
  beforeAll(async () => {
    suite.server = await startScriptedServer();
  });
  afterAll(async () => {
    await suite.server?.close();
  });
  beforeEach(() => {
    suite.time = fakeTime();
  });
  return suite;
}
