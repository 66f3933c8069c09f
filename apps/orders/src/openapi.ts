import type { INestApplication } from '@nestjs/common';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';

/** Where the sample serves Swagger UI; the OpenAPI JSON is at `${OPENAPI_PATH}-json`. */
export const OPENAPI_PATH = 'docs';

/**
 * Serves the OpenAPI document of the service: Swagger UI at `/docs`, the JSON at `/docs-json`.
 * The document is built on the first request, from the routes' decorators (`@Idempotent()`
 * documents its header and problem responses itself). The routes are the HTTP adapter's own,
 * outside Nest's guards, so they need no tenant.
 */
export function serveOpenApi(app: INestApplication): void {
  const config = new DocumentBuilder()
    .setTitle('Orders service')
    .setDescription(
      'The sample service of the idempotency library. Every call needs `X-Tenant-ID` (a UUID) except /health, ' +
        '/docs and the webhooks. See docs/idempotency-policy.md for the Idempotency-Key policy.',
    )
    .setVersion('0.1.0')
    .addBearerAuth(
      { type: 'http', scheme: 'bearer', description: 'ADMIN_TOKEN, for /admin/idempotency' },
      'admin-token',
    )
    .build();
  SwaggerModule.setup(OPENAPI_PATH, app, () => SwaggerModule.createDocument(app, config));
}
