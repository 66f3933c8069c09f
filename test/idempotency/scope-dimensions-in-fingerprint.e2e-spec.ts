import { Body, Controller, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from 'nestjs-idempotency';
import { send, type HttpResult } from '../support/http/send.js';

/**
 * docs/contract.md B.3 rule 12a: every dimension resolved but left out of the scope goes into the
 * fingerprint. The same key, user and body from another tenant (or user, or operation) is a 422,
 * never a replay of someone else's response. Issue 18 found the tenant left out: tenant B got
 * tenant A's response with `scope: ['principal', 'operation']`.
 */
@Controller()
class TransfersController {
  private seq = 0;

  @Post('principal-scope')
  @Idempotent({ scope: ['principal', 'operation'] })
  principalScope(@Body() body: unknown) {
    return { seq: ++this.seq, body };
  }

  @Post('operation-scope')
  @Idempotent({ scope: ['operation'] })
  operationScope(@Body() body: unknown) {
    return { seq: ++this.seq, body };
  }

  @Post('tenant-scope')
  @Idempotent({ scope: ['tenant'], operation: 'transfers.create' })
  tenantScope(@Body() body: unknown) {
    return { seq: ++this.seq, body };
  }

  @Post('tenant-scope-other')
  @Idempotent({ scope: ['tenant'], operation: 'transfers.create' })
  tenantScopeOther(@Body() body: unknown) {
    return { seq: ++this.seq, body };
  }

  @Post('custom-fingerprint')
  @Idempotent({ scope: ['principal', 'operation'], fingerprint: () => 'same for everyone' })
  customFingerprint() {
    return { seq: ++this.seq };
  }
}

describe.each(['express', 'fastify'] as const)(
  'scope dimensions left out of the identity are fingerprinted (%s, memory store)',
  (platform) => {
    let app: INestApplication;
    let url: string;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRoot({
            store: new MemoryIdempotencyStore(),
            tenant: (req) => req.headers['x-tenant-id'] as string | undefined,
            principal: (req) => req.headers['x-user-id'] as string | undefined,
            problemTypeBaseUri: 'https://docs.example.test/problems/',
          }),
        ],
        controllers: [TransfersController],
      })
      class ScopeModule {}
      app =
        platform === 'express'
          ? await NestFactory.create(ScopeModule, { rawBody: true, logger: false })
          : await NestFactory.create(ScopeModule, new FastifyAdapter(), { rawBody: true, logger: false });
      await app.listen(0, '127.0.0.1');
      url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    });
    afterAll(() => app?.close());

    const post = (
      path: string,
      key: string,
      who: { tenant?: string; user?: string },
      body: unknown = { amount: 100 },
    ) => {
      const headers: Record<string, string> = {};
      if (who.tenant !== undefined) headers['X-Tenant-ID'] = who.tenant;
      if (who.user !== undefined) headers['X-User-ID'] = who.user;
      return send(url, path, { key, body, headers });
    };
    const expectReused = (res: HttpResult) => {
      expect(res.status).toBe(422);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.json()).toMatchObject({ code: 'idempotency_key_reused' });
      expect(res.headers.get('idempotent-replayed')).toBeNull();
    };

    it('rule 12a: with scope [principal, operation], tenant B with the same user, key and body gets 422, not tenant A\u2019s response', async () => {
      const key = randomUUID();
      const first = await post('/principal-scope', key, { tenant: 'tenant-a', user: 'u1' });
      expect(first.status).toBe(201);
      expectReused(await post('/principal-scope', key, { tenant: 'tenant-b', user: 'u1' }));
      const retry = await post('/principal-scope', key, { tenant: 'tenant-a', user: 'u1' });
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.json()).toEqual(first.json());
    });

    it('rule 12a: a request without a tenant and one with a tenant are different requests', async () => {
      const key = randomUUID();
      expect((await post('/principal-scope', key, { user: 'u1' })).status).toBe(201);
      expectReused(await post('/principal-scope', key, { tenant: 'tenant-a', user: 'u1' }));
      expect((await post('/principal-scope', key, { user: 'u1' })).headers.get('idempotent-replayed')).toBe('true');
    });

    it('rule 12a: with scope [operation], another tenant or another user under one key gets 422', async () => {
      const key = randomUUID();
      expect((await post('/operation-scope', key, { tenant: 'tenant-a', user: 'u1' })).status).toBe(201);
      expectReused(await post('/operation-scope', key, { tenant: 'tenant-b', user: 'u1' }));
      expectReused(await post('/operation-scope', key, { tenant: 'tenant-a', user: 'u2' }));
      expect(
        (await post('/operation-scope', key, { tenant: 'tenant-a', user: 'u1' })).headers.get('idempotent-replayed'),
      ).toBe('true');
    });

    it('rule 12: with scope [tenant], another user or another operation under one key gets 422', async () => {
      const key = randomUUID();
      expect((await post('/tenant-scope', key, { tenant: 'tenant-a', user: 'u1' })).status).toBe(201);
      expectReused(await post('/tenant-scope', key, { tenant: 'tenant-a', user: 'u2' }));
      // Same operation name, another route template: the route is part of the fingerprint.
      expectReused(await post('/tenant-scope-other', key, { tenant: 'tenant-a', user: 'u1' }));
      // Another tenant is another record: it runs.
      expect(
        (await post('/tenant-scope', key, { tenant: 'tenant-b', user: 'u1' })).headers.get('idempotent-replayed'),
      ).toBeNull();
    });

    it('rule 16 with 12a: a custom fingerprint function still compares the tenant left out of the scope', async () => {
      const key = randomUUID();
      expect((await post('/custom-fingerprint', key, { tenant: 'tenant-a', user: 'u1' })).status).toBe(201);
      expectReused(await post('/custom-fingerprint', key, { tenant: 'tenant-b', user: 'u1' }));
      expect(
        (await post('/custom-fingerprint', key, { tenant: 'tenant-a', user: 'u1' })).headers.get('idempotent-replayed'),
      ).toBe('true');
    });
  },
);
