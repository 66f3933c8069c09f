import { Controller, HttpCode, Module, Param, Post, Res, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { Redis } from 'ioredis';
import { Idempotent, IdempotencyModule } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { claimRequest, newId } from 'nestjs-idempotency/testing';
import { send, type HttpResult } from '../support/http/send.js';
import { connectRedisOrFail, deleteKeys, redisUrl } from '../support/servers/redis.js';

type Platform = 'express' | 'fastify';
type AnyResponse = { raw?: ServerResponse } & Partial<ServerResponse>;
const rawOf = (res: AnyResponse) => (res.raw ?? res) as ServerResponse;

/** Every byte value once: a body no text decoding may touch. */
const BINARY = Buffer.from(Array.from({ length: 256 }, (_, byte) => byte));

/** Headers a replay must give back as they were: repeated names, Latin-1 text, odd names, a table value. */
function setUnusualHeaders(raw: ServerResponse): void {
  raw.setHeader('link', ['</orders?page=2>; rel="next"', '</orders?page=1>; rel="prev"']);
  raw.setHeader('x-note', 'caf\u00e9 \u00bd'); // Latin-1: Node sends these as single bytes
  raw.setHeader('x-empty', '');
  raw.setHeader('x-odd_name.v2~!', 'a,b;c="d"');
  raw.setHeader('vary', ['Origin', 'Accept-Encoding']);
  raw.setHeader('etag', 'W/"1-abc"');
  raw.setHeader('set-cookie', ['a=1; Path=/', 'b=2; Path=/; HttpOnly']);
}

@Controller()
class ReplayController {
  /** A JSON-like body of `size` bytes (compressible) under unusual headers. */
  @Post('sized/:size')
  @Idempotent()
  sized(@Param('size') size: string, @Res() res: AnyResponse) {
    const raw = rawOf(res);
    setUnusualHeaders(raw);
    raw.statusCode = 201;
    raw.setHeader('content-type', 'application/json; charset=utf-8');
    raw.end(Buffer.from('a'.repeat(Number(size))));
  }

  @Post('binary')
  @Idempotent()
  binary(@Res() res: AnyResponse) {
    const raw = rawOf(res);
    raw.statusCode = 200;
    raw.setHeader('content-type', 'application/octet-stream');
    raw.end(BINARY);
  }

  @Post('empty')
  @HttpCode(204)
  @Idempotent()
  empty() {
    return undefined;
  }
}

/** What a replay must repeat: status, body bytes and every replayable header (B.8). */
function fidelity(result: HttpResult) {
  const headers: Record<string, string> = {};
  result.headers.forEach((value, name) => {
    // The key echo is the library's own (on Fastify a handler that ends the raw response bypasses
    // the reply's headers, so the first answer lacks it): not part of the record.
    if (!['date', 'idempotent-replayed', 'idempotency-key', 'set-cookie', 'connection', 'keep-alive'].includes(name))
      headers[name] = value;
  });
  return { status: result.status, headers, body: result.body.toString('base64') };
}

/**
 * The Redis record of a small response holds its headers in the compact form (flag 16) up to
 * 512 bytes of headers and body, and compressed above (flag 8): the replay is the original either
 * way, byte for byte, on both platforms, at and around the boundary.
 */
describe.each<Platform>(['express', 'fastify'])(
  'Redis records around 512 bytes replay byte for byte (%s)',
  (platform) => {
    const prefix = `idem-review-compact-${platform}-${randomUUID().slice(0, 8)}`;
    let app: INestApplication;
    let url: string;
    let redis: Redis;

    beforeAll(async () => {
      await connectRedisOrFail();
      redis = new Redis(redisUrl());
      @Module({
        imports: [
          IdempotencyModule.forRoot({
            store: new RedisIdempotencyStore(redisUrl(), { prefix }),
            tenant: () => 't',
            principal: () => 'u',
          }),
        ],
        controllers: [ReplayController],
      })
      class CompactReplayModule {}
      app =
        platform === 'express'
          ? await NestFactory.create(CompactReplayModule, { rawBody: true, logger: false })
          : await NestFactory.create(CompactReplayModule, new FastifyAdapter(), { rawBody: true, logger: false });
      await app.listen(0, '127.0.0.1');
      url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    });
    afterAll(async () => {
      await app?.close();
      if (redis) {
        await deleteKeys(redis, prefix);
        await redis.quit();
      }
    });

    /** The flags byte of every record under the prefix (redis-record-format.ts). */
    async function recordFlags(): Promise<number[]> {
      const keys = await redis.keys(`${prefix}:*`);
      return Promise.all(keys.map(async (key) => (await redis.getBuffer(key))![1]!));
    }

    it('sweeps the body size across the boundary: every replay equals its original, and both forms were written', async () => {
      const mismatches: unknown[] = [];
      // About 155 bytes of compact headers: the 512-byte boundary falls near a 357-byte body.
      for (let size = 320; size <= 400; size += 1) {
        const key = randomUUID();
        const first = await send(url, `/sized/${size}`, { key });
        const replay = await send(url, `/sized/${size}`, { key });
        if (replay.headers.get('idempotent-replayed') !== 'true' || first.status !== 201)
          mismatches.push({ size, first: first.status, replay: replay.status });
        else if (JSON.stringify(fidelity(first)) !== JSON.stringify(fidelity(replay)))
          mismatches.push({ size, first: fidelity(first), replay: fidelity(replay) });
        // The first answer carried both cookies; the replay none (B.8 rule 21).
        if (first.headers.getSetCookie().length !== 2 || replay.headers.getSetCookie().length !== 0)
          mismatches.push({ size, cookies: [first.headers.getSetCookie(), replay.headers.getSetCookie()] });
      }
      expect(mismatches).toEqual([]);
      const flags = await recordFlags();
      expect(new Set(flags.map((f) => f & (8 | 16)))).toEqual(new Set([8, 16]));
    });

    it('replays a binary body and an empty 204 exactly', async () => {
      for (const path of ['/binary', '/empty']) {
        const key = randomUUID();
        const first = await send(url, path, { key });
        const replay = await send(url, path, { key });
        expect({ path, replayed: replay.headers.get('idempotent-replayed'), ...fidelity(replay) }).toEqual({
          path,
          replayed: 'true',
          ...fidelity(first),
        });
      }
    });
  },
);

/**
 * The store API takes any string as a header name or value (checkResponse): what `complete`
 * was given, `get` gives back, whichever form the record takes (flag 16 or JSON).
 */
describe('Redis store: headers the compact form must not corrupt', () => {
  const prefix = `idem-review-compact-store-${randomUUID().slice(0, 8)}`;
  let store: RedisIdempotencyStore;
  let redis: Redis;
  beforeAll(async () => {
    await connectRedisOrFail();
    redis = new Redis(redisUrl());
    store = new RedisIdempotencyStore(redisUrl(), { prefix });
    await store.onModuleInit();
  });
  afterAll(async () => {
    await store?.onApplicationShutdown();
    if (redis) {
      await deleteKeys(redis, prefix);
      await redis.quit();
    }
  });

  it.each([
    ['an empty name with a literal value', { '': 'v', etag: 'x' }],
    ['an empty name with a table value', { '': 'Express' }],
    ['an empty name with several values', { '': ['a', 'b'], 'content-type': 'application/json' }],
    ['a lone surrogate in a value', { 'x-a': 'broken \ud800 end' }],
  ])('%s round-trips', async (_, headers: Record<string, string | string[]>) => {
    const id = newId();
    const { record } = await store.claim(id, claimRequest());
    const response = { statusCode: 201, headers, body: Buffer.from('{"ok":true}') };
    const completed = await store.complete(id, record.ownerToken, response).catch((e: Error) => e);
    const read = await store.get(id).catch((e: Error) => e);
    expect({ completed, response: read instanceof Error ? read.message : read?.response }).toEqual({
      completed: true,
      response,
    });
  });
});
