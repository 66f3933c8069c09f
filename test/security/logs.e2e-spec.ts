import { randomBytes, randomUUID } from 'node:crypto';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { RecordingLogger } from '../support/recording-logger.js';
import { startSecurityApp, type SecurityApp } from '../support/apps/security.app.js';
import { send } from '../support/http/send.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';

/**
 * Logs name records by their key hash, never by the raw `Idempotency-Key` (DESIGN "Operations").
 * A scripted sequence walks the paths that log (replay, mismatch, released failure, unresolved
 * scope, an unreadable record, the store going away) and every line Nest logged is searched
 * for the raw key. It guards whatever logging the library adds later, too.
 */
describe('logs never hold a raw Idempotency-Key', () => {
  const logger = new RecordingLogger();
  const rawKey = `LOGKEY-${randomUUID()}`;
  const k1 = { id: 'k1', key: randomBytes(32) };
  const k2 = { id: 'k2', key: randomBytes(32) };
  const tenantHeaders = { 'X-Tenant-ID': 't1', 'X-User-ID': 'u1' };
  let server: ThrowawayRedis;
  let fixture: SecurityApp | undefined;

  const start = (activeKey: typeof k1) =>
    startSecurityApp(
      new RedisIdempotencyStore(server.url, { prefix: 'idem-sec-logs' }),
      { encryption: { keys: [activeKey], activeKeyId: activeKey.id } },
      logger,
    );
  const post = (key: string, body: object, headers: Record<string, string> = tenantHeaders) =>
    send(fixture!.url, '/secrets', { key, body, headers });

  beforeAll(async () => {
    server = await startRedisServer();
  });
  afterAll(async () => {
    await fixture?.app.close();
    await server?.stop();
  });

  it('a sequence with replays, conflicts and failures logs key hashes only', async () => {
    fixture = await start(k1);
    expect((await post(rawKey, { secret: 'a' })).status).toBe(201);
    expect((await post(rawKey, { secret: 'a' })).status).toBe(201);
    expect((await post(rawKey, { secret: 'b' })).status).toBe(422);
    expect((await post(`${rawKey}-fail`, { fail: true })).status).toBe(502);
    expect((await post(`${rawKey}-no-tenant`, { secret: 'a' }, { 'X-User-ID': 'u1' })).status).toBe(500);
    expect((await post('k'.repeat(300), { secret: 'a' })).status).toBe(400);
    await fixture.app.close();

    // The ring lost the key that sealed the record: it fails closed, and says so in the log.
    fixture = await start(k2);
    expect((await post(rawKey, { secret: 'a' })).status).toBe(500);
    // The store goes away: 503, logged with the record's hash.
    await server.stop();
    expect((await post(`${rawKey}-down`, { secret: 'a' })).status).toBe(503);
    await fixture.app.close();
    fixture = undefined;

    const errors = logger.at('error').join('\n');
    expect(errors).toContain('event=record_unreadable');
    expect(errors).toContain('event=store_error');
    expect(errors).toContain('cannot resolve the tenant');
    expect(logger.entries.length).toBeGreaterThan(5);
    expect(logger.entries.filter((entry) => entry.text.includes('LOGKEY-'))).toEqual([]);
  });
});
