import { randomUUID } from 'node:crypto';
import type { ChannelModel, ConfirmChannel } from 'amqplib';
import type { DataSource } from 'typeorm';
import { IDEMPOTENCY_KEY_MESSAGE_HEADER } from 'nestjs-idempotency/consumers';
import { amqpQueueArguments, assertAmqpRedeliveryTopology } from 'nestjs-idempotency/amqp';
import { buildFixtureOnce, startFixtureProcess, type FixtureProcess } from '../support/apps/compiled-fixture.js';
import { openIdempotencyDataSource } from '../support/servers/idempotency-data-source.js';
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
  publishConfirmed,
  rabbitmqUrl,
  readyCount,
  waitFor,
} from '../support/servers/rabbitmq.js';
import { connectRedisOrFail, deleteKeys, openRedis, redisUrl } from '../support/servers/redis.js';

const MESSAGES = 24;
const CONSUMERS = 3;
const KILLS = 8;
const LEASE_MS = 1000;

/** A consumer process and the message it is handling, as its `start` / `done` lines say. */
interface Consumer {
  process: FixtureProcess;
  current?: string;
  doomed?: boolean;
}

/** Where in a message's handling a kill landed: inside the handler, or just after it returned (around commit and ack). */
type KillPoint = 'in-handler' | 'after-handler';

/**
 * Consumer processes SIGKILLed at random points while they handle messages: RabbitMQ hands each
 * unacknowledged message to another consumer process, which finds the dead claim, waits out its
 * lease in the retry queue, takes it over and applies the message. Each message inserts one row
 * in `effects` (no unique constraint: a second application would show) inside its transactional
 * run, so a killed run leaves nothing, and exactly one row per message stands at the end.
 */
describe('RabbitMQ consumers SIGKILLed mid-message (real processes)', () => {
  const queue = `idem-crash-${randomUUID().slice(0, 8)}`;
  const redisPrefix = `idem-crash-${randomUUID().slice(0, 8)}`;
  let schema: string;
  let dataSource: DataSource;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  let mainJs: string;
  const consumers = new Set<Consumer>();

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    await connectRedisOrFail();
    connection = await connectRabbitOrFail();
    channel = await confirmChannel(connection);
    await channel.assertQueue(queue, { durable: true, arguments: amqpQueueArguments({ queue }) });
    await assertAmqpRedeliveryTopology(channel, { queue });
    schema = throwawaySchemaName('rmq_crash');
    const client = await connectPostgresOrFail();
    await client.query(`CREATE SCHEMA "${schema}"`);
    await client.query(
      `CREATE TABLE "${schema}".effects (id bigserial PRIMARY KEY, message_key text NOT NULL, pid integer NOT NULL, fencing_token integer NOT NULL)`,
    );
    await client.end();
    dataSource = await openIdempotencyDataSource(schema);
    mainJs = await buildFixtureOnce('rabbitmq-consumer');
  }, 240_000);

  afterAll(async () => {
    for (const consumer of consumers) consumer.process.kill('SIGKILL');
    await Promise.all([...consumers].map((consumer) => consumer.process.exited));
    if (connection) {
      await deleteQueues(connection, [queue, `${queue}.retry`, `${queue}.dead-letter`]);
      await connection.close();
    }
    await dataSource?.destroy();
    if (schema) await dropSchema(schema);
    const redis = await openRedis();
    await deleteKeys(redis, redisPrefix);
    await redis.quit();
  });

  const kills: KillPoint[] = [];
  const replacements: Promise<Consumer>[] = [];
  /**
   * Decides at each `start` / `done` line whether to kill that consumer, and when: a random
   * moment inside the handler (which works for 200 to 500 ms), or a few ms after it returned.
   * The killed process is replaced at once.
   */
  const maybeKill = (consumer: Consumer, point: KillPoint) => {
    if (kills.length >= KILLS || consumer.doomed || Math.random() > (point === 'in-handler' ? 0.6 : 0.2)) return;
    consumer.doomed = true;
    kills.push(point);
    setTimeout(
      () => {
        consumer.process.kill('SIGKILL');
        void consumer.process.exited.then(() => {
          consumers.delete(consumer);
          replacements.push(startConsumer());
        });
      },
      point === 'in-handler' ? Math.random() * 180 : Math.random() * 5,
    );
  };

  const startConsumer = async (): Promise<Consumer> => {
    const consumer: Consumer = {} as Consumer;
    consumer.process = await startFixtureProcess(
      mainJs,
      {
        QUEUE: queue,
        RABBITMQ_URL: rabbitmqUrl(),
        DATABASE_URL: TEST_DATABASE_URL,
        SCHEMA: schema,
        REDIS_URL: redisUrl(),
        REDIS_PREFIX: redisPrefix,
        LEASE_MS: String(LEASE_MS),
        WORK_MS: '200-500',
      },
      'consumer ready',
      (line) => {
        const [event, key] = line.split(' ');
        if (event === 'start') {
          consumer.current = key;
          maybeKill(consumer, 'in-handler');
        }
        if (event === 'done') {
          consumer.current = undefined;
          maybeKill(consumer, 'after-handler');
        }
      },
    );
    consumers.add(consumer);
    return consumer;
  };
  const effects = async () =>
    dataSource.query<{ message_key: string; applied: string; max_fencing: number }[]>(
      `SELECT message_key, count(*) AS applied, max(fencing_token) AS max_fencing FROM "${schema}".effects GROUP BY message_key`,
    );

  it(`${MESSAGES} messages, ${KILLS} consumer processes killed at random points: exactly one effect per message`, async () => {
    await Promise.all(Array.from({ length: CONSUMERS }, () => startConsumer()));
    const keys = Array.from({ length: MESSAGES }, (_, n) => `crash-${n}-${randomUUID()}`);
    for (const [n, key] of keys.entries()) {
      await publishConfirmed(
        channel,
        queue,
        { pattern: 'work', data: { n } },
        { persistent: true, headers: { [IDEMPOTENCY_KEY_MESSAGE_HEADER]: key } },
      );
    }

    await waitFor(async () => (await effects()).length === MESSAGES, `all ${MESSAGES} messages took effect`, 60_000);
    await waitFor(
      async () =>
        (await readyCount(channel, queue)) === 0 &&
        (await readyCount(channel, `${queue}.retry`)) === 0 &&
        [...consumers].every((c) => !c.current && !c.doomed),
      'the queues are empty and no consumer is busy',
      30_000,
    );
    await Promise.all(replacements);
    // Closing the consumers hands back whatever they had not acknowledged: nothing, if all was settled.
    for (const consumer of consumers) consumer.process.kill('SIGTERM');
    await Promise.all([...consumers].map((consumer) => consumer.process.exited));
    consumers.clear();
    expect(await readyCount(channel, queue)).toBe(0);
    expect(await readyCount(channel, `${queue}.dead-letter`)).toBe(0);

    const applied = await effects();
    expect(applied.map((row) => row.message_key).sort()).toEqual([...keys].sort());
    expect(applied.filter((row) => Number(row.applied) !== 1)).toEqual([]);
    // The kills happened, mostly inside handlers, whose messages were then applied by runs that
    // took the dead claims over (fencing token above 1).
    expect(kills).toHaveLength(KILLS);
    expect(applied.filter((row) => row.max_fencing > 1).length).toBeGreaterThanOrEqual(
      kills.includes('in-handler') ? 1 : 0,
    );
  }, 120_000);
});
