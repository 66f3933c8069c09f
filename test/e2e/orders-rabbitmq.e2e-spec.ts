import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import type { ChannelModel, ConfirmChannel } from 'amqplib';
import { IsNull, Not } from 'typeorm';
import { IDEMPOTENCY_KEY_MESSAGE_HEADER } from 'nestjs-idempotency/consumers';
import { AMQP_DEAD_LETTER_REASON_HEADER } from 'nestjs-idempotency/amqp';
import { TransactionRunner } from '../../apps/orders/src/database/transaction-runner.js';
import { OrderNotification } from '../../apps/orders/src/notifications/order-notification.entity.js';
import { OutboxEvent } from '../../apps/orders/src/events/outbox-event.entity.js';
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
  publishConfirmed,
  rabbitmqUrl,
  readyCount,
  waitFor,
} from '../support/servers/rabbitmq.js';
import { startOrdersApp } from '../support/orders/orders-app.js';
import { connectRedisOrFail, TEST_REDIS_URL } from '../support/servers/redis.js';
import { newTenant, orderBody } from '../support/orders/orders-fixtures.js';

/**
 * One boundary from HTTP to the queue: with `RABBITMQ_URL`, `POST /orders` writes its
 * `order.created` event with the request's derived key, the relay publishes it with that key in
 * the `idempotency-key` header, and the consumer (`@IdempotentConsumer` + `rmqSettlement`, in the
 * same process) takes effect once per key. A retried POST and a redelivered message are each
 * applied once.
 */
describe('orders service with RABBITMQ_URL (PostgreSQL + Redis + RabbitMQ)', () => {
  const schema = throwawaySchemaName('orders_rmq');
  const queue = `orders-rmq-${randomUUID().slice(0, 8)}`;
  let app: INestApplication;
  let url: string;
  let db: TransactionRunner;
  let connection: ChannelModel;
  let channel: ConfirmChannel;

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    await connectRedisOrFail();
    connection = await connectRabbitOrFail();
    channel = await confirmChannel(connection);
    ({ app, url } = await startOrdersApp({
      DATABASE_URL: TEST_DATABASE_URL,
      DATABASE_SCHEMA: schema,
      REDIS_URL: TEST_REDIS_URL,
      QUEUE_PREFIX: `bull-${schema}`,
      RABBITMQ_URL: rabbitmqUrl(),
      RABBITMQ_QUEUE: queue,
      OUTBOX_POLL_MS: '200',
    }));
    db = app.get(TransactionRunner);
  });
  afterAll(async () => {
    await app?.close();
    if (connection) {
      await deleteQueues(connection, [queue, `${queue}.retry`, `${queue}.dead-letter`]);
      await connection.close();
    }
    await dropSchema(schema);
  });

  const notificationsOf = (orderId: string) => db.read((manager) => manager.countBy(OrderNotification, { orderId }));

  it('a retried POST /orders and its published order.created are each applied once', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const first = await send(url, '/orders', { key, body, headers: { 'X-Tenant-ID': tenantId } });
    const retry = await send(url, '/orders', { key, body, headers: { 'X-Tenant-ID': tenantId } });
    expect(first.status).toBe(201);
    expect(retry.status).toBe(201);
    const orderId = first.json<{ id: string }>().id;
    expect(retry.json<{ id: string }>().id).toBe(orderId);

    // One event, carrying the request's derived key (never the client's raw key).
    const events = await db.read((manager) => manager.findBy(OutboxEvent, { orderId }));
    expect(events).toHaveLength(1);
    const messageKey = events[0].messageKey!;
    expect(messageKey).toMatch(/^idk_/);
    expect(messageKey).not.toContain(key);

    await waitFor(async () => (await notificationsOf(orderId)) === 1, 'the confirmation was sent');
    await waitFor(
      async () =>
        (await db.read((manager) => manager.countBy(OutboxEvent, { orderId, dispatchedAtMs: Not(IsNull()) }))) === 1,
      'the event is marked dispatched',
    );

    // The broker delivers the message again (a consumer died before its ack, a relay published twice).
    for (let i = 0; i < 3; i++) {
      await publishConfirmed(
        channel,
        queue,
        { pattern: 'order.created', data: { eventId: events[0].id, tenantId, orderId } },
        { persistent: true, messageId: randomUUID(), headers: { [IDEMPOTENCY_KEY_MESSAGE_HEADER]: messageKey } },
      );
    }
    await waitFor(
      async () => (await readyCount(channel, queue)) === 0 && (await readyCount(channel, `${queue}.retry`)) === 0,
      'the duplicates were taken',
    );
    // Closing hands back anything unacknowledged; all was acknowledged, as duplicates, without a second confirmation.
    await app.close();
    expect(await readyCount(channel, queue)).toBe(0);
    ({ app, url } = await startOrdersApp({
      DATABASE_URL: TEST_DATABASE_URL,
      DATABASE_SCHEMA: schema,
      REDIS_URL: TEST_REDIS_URL,
      QUEUE_PREFIX: `bull-${schema}`,
      RABBITMQ_URL: rabbitmqUrl(),
      RABBITMQ_QUEUE: queue,
      OUTBOX_POLL_MS: '200',
    }));
    db = app.get(TransactionRunner);
    expect(await notificationsOf(orderId)).toBe(1);
    const listed = await send(url, `/orders/${orderId}/notifications`, {
      method: 'GET',
      headers: { 'X-Tenant-ID': tenantId },
    });
    expect(listed.json<unknown[]>()).toHaveLength(1);
  });

  it('a message whose body is not JSON goes to the dead-letter queue with its reason, and nothing runs', async () => {
    const before = await db.read((manager) => manager.count(OrderNotification));
    await publishConfirmed(channel, queue, 'order created!', {
      headers: { [IDEMPOTENCY_KEY_MESSAGE_HEADER]: randomUUID() },
    });
    let letters: Awaited<ReturnType<typeof drain>> = [];
    await waitFor(async () => {
      letters = [...letters, ...(await drain(channel, `${queue}.dead-letter`))];
      return letters.length > 0;
    }, 'the message was dead-lettered');
    expect(letters.map((letter) => letter.properties.headers?.[AMQP_DEAD_LETTER_REASON_HEADER])).toEqual([
      'unparsable-body',
    ]);
    expect(await db.read((manager) => manager.count(OrderNotification))).toBe(before);
  });
});
