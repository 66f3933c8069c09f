import { HANDLER_BEHAVIOURS } from './support/handler-behaviours.js';
import { openLayerBackend, type LayerBackend, type LayerBackendName } from './support/layer-backends.js';
import { startLayersApp, type LayersApp, type Platform } from './support/layers.app.js';
import { OUTER_LAYERS } from './support/outer-layers.js';
import { runCase } from './support/run-case.js';

/**
 * The record follows what the handler did, whatever surrounds it (docs/contract.md B.7 rule 17a).
 *
 * Every outer layer of `OUTER_LAYERS` (global interceptors and filters, outside the route's
 * `@Idempotent()`, and clients that leave) × every handler behaviour of `HANDLER_BEHAVIOURS` ×
 * Express and Fastify × memory, Redis, and PostgreSQL with a transactional route whose handler
 * writes a TypeORM business row. Each case proves:
 *  (a) one run of the handler while its record is live: a retry while it runs (and, when the
 *      layer answers first, another after that answer) gets 409 in progress, and none runs it;
 *  (b) business writes committed ⇔ the record completed with the handler's success;
 *  (c) once the handler has settled, retries get its true outcome: a success or a 4xx replayed
 *      with the handler's status and body (not the layer's 408, 502 or 500), a 5xx released so
 *      that the retry runs the handler afresh.
 * One app per platform and backend serves all of its cases, each with a key and tag of its own.
 * Add a layer or a handler behaviour to its table and it joins every combination.
 */
const PLATFORMS: Platform[] = ['express', 'fastify'];
const BACKENDS: LayerBackendName[] = ['memory', 'redis', 'postgres-transactional'];
const CASES = OUTER_LAYERS.flatMap((layer) => HANDLER_BEHAVIOURS.map((handler) => ({ layer, handler })));

describe.each(PLATFORMS)('layers around an @Idempotent() handler (%s)', (platform) => {
  describe.each(BACKENDS)('%s', (backendName) => {
    let backend: LayerBackend;
    let fixture: LayersApp;

    beforeAll(async () => {
      backend = await openLayerBackend(backendName, platform);
      fixture = await startLayersApp(platform, backend, OUTER_LAYERS);
    });
    afterAll(async () => {
      await fixture?.app.close();
      await backend?.close();
    });

    it.each(CASES)(
      '$layer.title, handler $handler.title: one run, writes ⇔ record, retries get its true outcome',
      async ({ layer, handler }) => {
        const { observed, expected, firstAnswer } = await runCase(fixture, backend, layer, handler);
        try {
          expect(observed).toEqual(expected);
        } catch (error) {
          (error as Error).message += `\n\nThe first request's client saw: ${firstAnswer}`;
          throw error;
        }
      },
    );
  });
});
