import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { INestApplication } from '@nestjs/common';
import type { ChannelModel, ConfirmChannel } from 'amqplib';
import { IsNull, Not } from 'typeorm';
import { TransactionRunner } from '../../apps/orders/src/database/transaction-runner.js';
import { OutboxEvent } from '../../apps/orders/src/events/outbox-event.entity.js';
import { OutboxRelay } from '../../apps/orders/src/events/outbox.relay.js';
import { send } from '../support/http/send.js';
import {
  connectPostgresOrFail,
  dropSchema,
  TEST_DATABASE_URL,
  throwawaySchemaName,
} from '../support/servers/postgres.js';
import {
  confirmChannel,
  connectRabbitOrFail,
  deleteQueues,
  drain,
  rabbitmqUrl,
  waitFor,
} from '../support/servers/rabbitmq.js';
import { startOrdersApp } from '../support/orders/orders-app.js';
import { newTenant, orderBody } from '../support/orders/orders-fixtures.js';

const HOUR_MS = 3_600_000;

/** `count` pending outbox events (for orders that need not exist: the relays only publish them). */
function pendingEvents(count: number, createdAtMs = Date.now()): OutboxEvent[] {
  return Array.from({ length: count }, (_, i) =>
    Object.assign(new OutboxEvent(), {
      id: randomUUID(),
      type: 'order.created' as const,
      tenantId: randomUUID(),
      orderId: randomUUID(),
      createdAtMs: createdAtMs + i,
      dispatchedAtMs: null,
      messageKey: `idk_${randomUUID()}`,
    }),
  );
}

/**
 * Outbox hygiene on PostgreSQL: two instances' relays share the pending events through
 * `FOR UPDATE SKIP LOCKED` (each event published once, on a real RabbitMQ queue nobody
 * consumes), and dispatched events are deleted in batches once past their retention.
 */
describe('outbox relays of two instances on one PostgreSQL schema', () => {
  const schema = throwawaySchemaName('orders_outbox');
  const queue = `orders-outbox-${randomUUID().slice(0, 8)}`;
  const apps: INestApplication[] = [];
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  let db: TransactionRunner;

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    connection = await connectRabbitOrFail();
    channel = await confirmChannel(connection);
    const env = {
      DATABASE_URL: TEST_DATABASE_URL,
      DATABASE_SCHEMA: schema,
      RABBITMQ_URL: rabbitmqUrl(),
      RABBITMQ_QUEUE: queue,
      // Publish only: the test reads the queue. Relays run when kicked.
      QUEUE_WORKER: 'false',
      OUTBOX_POLL_MS: '600000',
      OUTBOX_CLEANUP_INTERVAL_MS: '86400000',
      OUTBOX_RETENTION_MS: String(HOUR_MS),
    };
    apps.push((await startOrdersApp(env)).app);
    apps.push((await startOrdersApp(env)).app);
    db = apps[0].get(TransactionRunner);
    for (const app of apps) await app.get(OutboxRelay).idle();
  });
  afterAll(async () => {
    for (const app of apps) await app.close();
    if (connection) {
      await deleteQueues(connection, [queue, `${queue}.retry`, `${queue}.dead-letter`]);
      await connection.close();
    }
    await dropSchema(schema);
  });

  it('300 pending events, both relays kicked at once: every event is published exactly once', async () => {
    const events = pendingEvents(300);
    await db.transaction((manager) => manager.insert(OutboxEvent, events));
    const relays = apps.map((app) => app.get(OutboxRelay));
    for (const relay of relays) relay.kick();
    await Promise.all(relays.map((relay) => relay.idle()));
    expect(await db.read((manager) => manager.countBy(OutboxEvent, { dispatchedAtMs: IsNull() }))).toBe(0);

    const published = new Map<string, number>();
    await waitFor(async () => {
      for (const message of await drain(channel, queue)) {
        const { eventId } = JSON.parse(message.content.toString()).data as { eventId: string };
        published.set(eventId, (published.get(eventId) ?? 0) + 1);
      }
      return published.size >= events.length;
    }, 'all events were read from the queue');
    expect([...published.keys()].sort()).toEqual(events.map((event) => event.id).sort());
    expect([...published.values()].filter((times) => times !== 1)).toEqual([]);
  });

  it('dispatched events past their retention are deleted in batches by both instances at once; the rest stay', async () => {
    const now = Date.now();
    const old = pendingEvents(1_200, now - 3 * HOUR_MS).map((event, i) => ({
      ...event,
      dispatchedAtMs: now - 2 * HOUR_MS + i,
    }));
    const recent = pendingEvents(50, now - 60_000).map((event) => ({ ...event, dispatchedAtMs: now - 30_000 }));
    const pending = pendingEvents(20, now - 3 * HOUR_MS);
    await db.transaction(async (manager) => {
      await manager.delete(OutboxEvent, { dispatchedAtMs: Not(IsNull()) });
      for (const batch of [old, recent, pending]) await manager.insert(OutboxEvent, batch);
    });
    const deleted = await Promise.all(apps.map((app) => app.get(OutboxRelay).cleanUp()));
    expect(deleted[0] + deleted[1]).toBe(1_200);
    const left = await db.read((manager) => manager.find(OutboxEvent, { select: { id: true } }));
    expect(left.map((event) => event.id).sort()).toEqual([...recent, ...pending].map((event) => event.id).sort());
  });
});

/** The embedded database (sql.js, one connection) keeps relaying and cleaning without row locks. */
describe('outbox on the embedded database', () => {
  let dir: string;
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'orders-outbox-'));
    ({ app, url } = await startOrdersApp({
      DATA_DIR: dir,
      OUTBOX_RETENTION_MS: '0',
      OUTBOX_CLEANUP_INTERVAL_MS: '86400000',
    }));
  });
  afterAll(async () => {
    await app?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('the event of an order is dispatched (in-process), then deleted by the cleanup once past its retention', async () => {
    const tenantId = newTenant();
    const created = await send(url, '/orders', {
      key: randomUUID(),
      body: orderBody(),
      headers: { 'X-Tenant-ID': tenantId },
    });
    expect(created.status).toBe(201);
    const orderId = created.json<{ id: string }>().id;
    const db = app.get(TransactionRunner);
    await waitFor(
      async () =>
        (await db.read((manager) => manager.countBy(OutboxEvent, { orderId, dispatchedAtMs: Not(IsNull()) }))) === 1,
      'the event was dispatched',
    );
    const notifications = await send(url, `/orders/${orderId}/notifications`, {
      method: 'GET',
      headers: { 'X-Tenant-ID': tenantId },
    });
    expect(notifications.json<unknown[]>()).toHaveLength(1);
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(await app.get(OutboxRelay).cleanUp()).toBeGreaterThanOrEqual(1);
    expect(await db.read((manager) => manager.countBy(OutboxEvent, { orderId }))).toBe(0);
  });
});
