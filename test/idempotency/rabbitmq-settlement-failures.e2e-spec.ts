import { randomUUID } from 'node:crypto';
import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Transport } from '@nestjs/microservices';
import { metrics, type Attributes } from '@opentelemetry/api';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import type { ChannelModel, ConfirmChannel, GetMessage } from 'amqplib';
import { IdempotencyConfigurationError, IdempotencyModule, IdempotencyService } from 'nestjs-idempotency';
import { IDEMPOTENCY_KEY_MESSAGE_HEADER, IdempotentConsumer } from 'nestjs-idempotency/consumers';
import {
  AMQP_DEAD_LETTER_REASON_HEADER,
  amqpRetryQueueOptions,
  idempotentAmqpHandler,
  rmqMessageKey,
  rmqSettlement,
  type AmqpRedeliveryOptions,
  type RmqSettlementOptions,
} from 'nestjs-idempotency/amqp';
import { IDEMPOTENCY_METRICS } from 'nestjs-idempotency/telemetry';
import {
  CHARGE_ADAPTERS,
  CHARGE_CONSUMER,
  Probe,
  type Charge,
  type ChargeAdapter,
  type StartChargeAdapter,
} from '../support/apps/rabbitmq-charges.js';
import { RecordingLogger } from '../support/recording-logger.js';
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
import { connectRedisOrFail } from '../support/servers/redis.js';

/** A reader the test collects from on demand (no export interval). */
class OnDemandMetricReader extends MetricReader {
  protected async onShutdown(): Promise<void> {}
  protected async onForceFlush(): Promise<void> {}
}

const reader = new OnDemandMetricReader();

/** The settlement fallbacks counted so far whose attributes include `attributes`. */
async function fallbacks(attributes: Attributes): Promise<number> {
  const { resourceMetrics } = await reader.collect();
  return resourceMetrics.scopeMetrics
    .flatMap((scope) => scope.metrics)
    .filter((metric) => metric.descriptor.name === IDEMPOTENCY_METRICS.settlementFallbacks)
    .flatMap((metric) => metric.dataPoints as { attributes: Attributes; value: unknown }[])
    .filter((point) => Object.entries(attributes).every(([name, value]) => point.attributes[name] === value))
    .reduce((sum, point) => sum + Number(point.value), 0);
}

beforeAll(() => {
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
});
afterAll(() => {
  metrics.disable();
});

/**
 * Configurations that cannot settle stop the application at startup, with a message that names
 * the fix: `rmqSettlement()` without its queue, `idempotentAmqpHandler()` without a queue or on a
 * channel without publisher confirms.
 */
describe('RabbitMQ settlement: configurations refused at startup', () => {
  let connection: ChannelModel;

  beforeAll(async () => {
    await connectRedisOrFail();
    connection = await connectRabbitOrFail();
  });
  afterAll(async () => {
    await connection?.close();
  });

  it('rmqSettlement() without queue stops the microservice before it consumes, naming the handler and the fix', async () => {
    const queue = `idem-startup-${randomUUID().slice(0, 8)}`;
    @Controller()
    class NoQueueConsumer {
      @EventPattern<string>('charge.requested')
      @IdempotentConsumer({
        consumer: 'billing.no-queue',
        key: rmqMessageKey,
        // What the docs once showed: no queue (JavaScript, or a cast, gets past the type).
        settlement: rmqSettlement({ maxAttempts: 3 } as RmqSettlementOptions),
      })
      charge() {
        return 'charged';
      }
    }
    @Module({ imports: [IdempotencyModule.forRoot({})], controllers: [NoQueueConsumer] })
    class NoQueueModule {}
    const service = await NestFactory.createMicroservice(NoQueueModule, {
      transport: Transport.RMQ,
      options: { urls: [rabbitmqUrl()], queue, noAck: false, maxConnectionAttempts: 1 },
      logger: false,
    });
    try {
      const started = service.listen();
      await expect(started).rejects.toThrow(IdempotencyConfigurationError);
      await expect(started).rejects.toThrow(
        /@IdempotentConsumer\(\) on NoQueueConsumer\.charge: settlement: rmqSettlement\(\) needs `queue`.*rmqSettlement\(\{ queue: 'orders' \}\)/,
      );
    } finally {
      await service.close();
    }
    // It never consumed: the queue was not even declared.
    const channel = await confirmChannel(connection);
    await expect(channel.checkQueue(queue)).rejects.toThrow(/NOT_FOUND/);
  });

  it('idempotentAmqpHandler() refuses a channel without publisher confirms, and a missing queue', async () => {
    @Module({ imports: [IdempotencyModule.forRoot({})] })
    class HandlerModule {}
    const app = await NestFactory.createApplicationContext(HandlerModule, { logger: false });
    try {
      const idempotency = app.get(IdempotencyService);
      const plain = await connection.createChannel();
      expect(() =>
        idempotentAmqpHandler(idempotency, { channel: plain, queue: 'orders', consumer: 'billing.plain' }, () => 1),
      ).toThrow(/channel must be a confirm channel \(connection\.createConfirmChannel\(\)\)/);
      await plain.close();
      const confirmed = await confirmChannel(connection);
      expect(() =>
        idempotentAmqpHandler(
          idempotency,
          { channel: confirmed, consumer: 'billing.no-queue' } as unknown as Parameters<
            typeof idempotentAmqpHandler
          >[1],
          () => 1,
        ),
      ).toThrow(/queue must name the queue the consumer reads/);
      await confirmed.close();
    } finally {
      await app.close();
    }
  });
});

/** One consumer of a queue of its own, with the broker's side declared by the test. */
interface Scenario {
  queue: string;
  retryQueue: string;
  deadLetterQueue: string;
  redelivery: AmqpRedeliveryOptions;
}

function scenario(name: string, overrides: Partial<AmqpRedeliveryOptions> = {}): Scenario {
  const queue = `idem-${name}-${randomUUID().slice(0, 8)}`;
  return {
    queue,
    retryQueue: `${queue}.retry`,
    deadLetterQueue: `${queue}.dead-letter`,
    redelivery: { queue, retryDelayMs: 200, maxRetryDelayMs: 1000, maxAttempts: 3, ...overrides },
  };
}

/**
 * Settlements that cannot be carried out, on the real broker, through both adapters: the message
 * is never left unacknowledged on a live channel; it goes back to its queue (a nack with requeue,
 * or the broker's own requeue when the channel is gone), the fallback is logged and counted, and
 * the message is settled as decided once the broker accepts it again.
 */
describe.each<[string, StartChargeAdapter]>(CHARGE_ADAPTERS)('RabbitMQ settlement failures: %s', (_name, start) => {
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  const created: string[] = [];
  const adapters: ChargeAdapter[] = [];

  beforeAll(async () => {
    await connectRedisOrFail();
    connection = await connectRabbitOrFail();
    channel = await confirmChannel(connection);
  });
  afterAll(async () => {
    // Closed again after a failed test (closing twice is harmless).
    for (const adapter of adapters) await adapter.close().catch(() => undefined);
    if (!connection) return;
    await deleteQueues(connection, created);
    await connection.close();
  });

  /** Starts a consumer on `s` (the queue's name read from a provider at startup, on Nest's transport). */
  async function consume(s: Scenario, probe: Probe, logs: RecordingLogger): Promise<ChargeAdapter> {
    created.push(s.queue, s.retryQueue, s.deadLetterQueue);
    const adapter = await start({ redelivery: s.redelivery, probe, connection, logger: logs, queueFromProvider: true });
    adapters.push(adapter);
    return adapter;
  }
  const publish = (s: Scenario, adapter: ChargeAdapter, charge: Charge, key: string | null) =>
    publishConfirmed(channel, s.queue, adapter.encode(charge), {
      persistent: true,
      headers: { 'x-test': charge.ref, ...(key !== null && { [IDEMPOTENCY_KEY_MESSAGE_HEADER]: key }) },
    });
  const fallbackLines = (logs: RecordingLogger, action: string, outcome: string) =>
    logs
      .at('error')
      .filter(
        (line) =>
          line.includes('event=settlement_fallback') &&
          line.includes(`consumer=${CHARGE_CONSUMER}`) &&
          line.includes(`action=${action}`) &&
          line.includes(`outcome=${outcome}`),
      );

  it('a dead letter the broker refuses (x-overflow: reject-publish) is nacked back to its queue, logged and counted, and dead-lettered once the queue accepts', async () => {
    const s = scenario('refused', { assertTopology: false });
    const probe = new Probe();
    const logs = new RecordingLogger();
    await channel.assertQueue(s.retryQueue, amqpRetryQueueOptions(s.redelivery));
    await channel.assertQueue(s.deadLetterQueue, {
      durable: true,
      arguments: { 'x-max-length': 0, 'x-overflow': 'reject-publish' },
    });
    const counted = { consumer: CHARGE_CONSUMER, action: 'dead-letter', outcome: 'requeued' };
    const before = await fallbacks(counted);
    const adapter = await consume(s, probe, logs);
    const ref = randomUUID();
    await publish(s, adapter, { ref, amountCents: 7 }, null);
    // Poison (no key): each dead letter is refused, so the message comes back again and again.
    await waitFor(() => probe.delivered(undefined) >= 3, 'the refused dead letter was delivered again twice');
    await waitFor(async () => (await fallbacks(counted)) >= before + 2, 'two fallbacks counted');
    expect(fallbackLines(logs, 'dead-letter', 'requeued').length).toBeGreaterThanOrEqual(2);
    expect(fallbackLines(logs, 'dead-letter', 'requeued')[0]).toMatch(/error="?message nacked/);

    // The dead-letter queue accepts again: the next delivery is dead-lettered, with its reason.
    await channel.deleteQueue(s.deadLetterQueue);
    await channel.assertQueue(s.deadLetterQueue, { durable: true });
    const letters: GetMessage[] = [];
    await waitFor(async () => {
      letters.push(...(await drain(channel, s.deadLetterQueue)));
      return letters.length > 0;
    }, 'the message reached the dead-letter queue');
    expect(
      letters.map((m) => [m.properties.headers?.['x-test'], m.properties.headers?.[AMQP_DEAD_LETTER_REASON_HEADER]]),
    ).toEqual([[ref, 'missing-key']]);
    await adapter.close();
    // Nothing was left unacknowledged: with the consumer gone, nothing came back to the queue.
    expect(await readyCount(channel, s.queue)).toBe(0);
    expect(await readyCount(channel, s.retryQueue)).toBe(0);
  });

  it('a channel error while settling (the retry queue exists with other arguments): the broker requeues the message, the fallback is logged and counted, and the redelivery on a new channel is handled', async () => {
    const s = scenario('channel-error');
    const probe = new Probe();
    const logs = new RecordingLogger();
    await channel.assertQueue(s.deadLetterQueue, { durable: true });
    // Not the settler's declaration: declaring it again with its own arguments closes the channel (406).
    await channel.assertQueue(s.retryQueue, { durable: true, arguments: { 'x-max-length': 1000 } });
    const counted = { consumer: CHARGE_CONSUMER, action: 'retry', outcome: 'channel_closed' };
    const before = await fallbacks(counted);
    const adapter = await consume(s, probe, logs);
    const ref = randomUUID();
    probe.failures.set(ref, [new Error('ledger timeout')]);
    await publish(s, adapter, { ref, amountCents: 9 }, ref);
    await waitFor(() => probe.ran(ref) === 2, 'the message was delivered again on a new channel, and handled');
    await waitFor(async () => (await fallbacks(counted)) === before + 1, 'the fallback was counted');
    expect(fallbackLines(logs, 'retry', 'channel_closed')).toHaveLength(1);
    expect(fallbackLines(logs, 'retry', 'channel_closed')[0]).toMatch(/PRECONDITION_FAILED|PRECONDITION-FAILED/);
    await waitFor(async () => (await readyCount(channel, s.queue)) === 0, 'the queue is empty');
    await adapter.close();
    expect(await readyCount(channel, s.queue)).toBe(0);
    expect(probe.delivered(ref)).toBe(2);
  });
});
