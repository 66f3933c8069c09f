import { send } from '../support/http/send.js';
import { backends } from '../support/orders/backends.js';
import { useOrdersApp } from '../support/orders/orders-app.js';

const [embeddedName, embeddedBackend] = backends[1];

/** `GET /docs` and `/docs-json` of the sample (Express): `@Idempotent()` documents itself. */
describe(`OpenAPI document on ${embeddedName}`, () => {
  const served = useOrdersApp(embeddedBackend);

  it('documents the required Idempotency-Key header and the problem responses of POST /orders', async () => {
    const res = await send(served.url, '/docs-json', { method: 'GET' });
    expect(res.status).toBe(200);
    const document = res.json();
    const create = document.paths['/orders'].post;
    expect(create.parameters).toContainEqual(
      expect.objectContaining({
        name: 'Idempotency-Key',
        in: 'header',
        required: true,
        schema: { type: 'string', maxLength: 255 },
      }),
    );
    for (const status of ['400', '409', '422', '503']) {
      const schema = create.responses[status]?.content?.['application/problem+json']?.schema;
      expect({ status, required: schema?.required }).toEqual({
        status,
        required: ['type', 'title', 'status', 'retryable'],
      });
      expect(schema?.properties?.retryable?.type).toBe('boolean');
    }
    expect(create.responses['422'].description).toMatch(/different request payload/);
    expect(create.responses['400'].description).toMatch(/missing or invalid/);
    // Declaring responses must not drop the route's own success status.
    expect(create.responses['201']).toBeDefined();
  });

  it('leaves routes without @Idempotent() alone', async () => {
    const document = (await send(served.url, '/docs-json', { method: 'GET' })).json();
    const list = document.paths['/orders'].get;
    expect((list.parameters ?? []).map((p: { name: string }) => p.name)).not.toContain('Idempotency-Key');
    expect(list.responses['422']).toBeUndefined();
  });

  it('serves Swagger UI at /docs without a tenant', async () => {
    const res = await send(served.url, '/docs', { method: 'GET' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(res.text).toContain('swagger-ui');
  });
});
