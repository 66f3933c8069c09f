import { randomUUID } from 'node:crypto';
import { UnprocessableEntityException } from '@nestjs/common';
import type { ChannelModel, ConfirmChannel, ConsumeMessage, GetMessage } from 'amqplib';
import { IDEMPOTENCY_KEY_MESSAGE_HEADER } from 'nestjs-idempotency/consumers';
import {
  AMQP_ATTEMPTS_HEADER,
  AMQP_CONSUMER_HEADER,
  AMQP_DEAD_LETTER_ERROR_HEADER,
  AMQP_DEAD_LETTER_REASON_HEADER,
  assertAmqpRedeliveryTopology,
  type AmqpRedeliveryOptions,
} from 'nestjs-idempotency/amqp';
import {
  CHARGE_ADAPTERS,
  CHARGE_CONSUMER as CONSUMER,
  Probe,
  type Charge,
  type ChargeAdapter,
  type StartChargeAdapter,
} from '../support/apps/rabbitmq-charges.js';
import {
  confirmChannel,
  connectRabbitOrFail,
  deleteQueues,
  drain,
  publishConfirmed,
  readyCount,
  waitFor,
} from '../support/servers/rabbitmq.js';
import { connectRedisOrFail } from '../support/servers/redis.js';

/**
 * RabbitMQ redelivers: a consumer that dies before its ack gets the message back, and so does
 * one that nacks. Both adapters, on the real broker (127.0.0.1:5672) with the Redis store: every
 * message is acknowledged exactly once, duplicates never run the handler, an in-progress
 * duplicate waits in the retry queue instead of looping, and poison ends in the dead-letter
 * queue with its reason.
 */
describe.each<[string, StartChargeAdapter]>(CHARGE_ADAPTERS)('RabbitMQ consumers: %s', (_name, startAdapter) => {
  const queue = `idem-consumers-${randomUUID().slice(0, 8)}`;
  const redelivery: AmqpRedeliveryOptions = { queue, retryDelayMs: 200, maxRetryDelayMs: 5000, maxAttempts: 3 };
  const retryQueue = `${queue}.retry`;
  const deadLetterQueue = `${queue}.dead-letter`;
  const directExchange = `${queue}.direct`;
  const topicExchange = `${queue}.topic`;
  const probe = new Probe();
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  let adapter: ChargeAdapter;
  const deadLetters: GetMessage[] = [];

  beforeAll(async () => {
    await connectRedisOrFail();
    connection = await connectRabbitOrFail();
    channel = await confirmChannel(connection);
    await assertAmqpRedeliveryTopology(channel, redelivery);
    adapter = await startAdapter({ redelivery, probe, connection });
    // Producers publishing through exchanges: the queue is bound to a direct and a topic exchange.
    await channel.assertExchange(directExchange, 'direct', { durable: false, autoDelete: false });
    await channel.bindQueue(queue, directExchange, 'charge');
    await channel.assertExchange(topicExchange, 'topic', { durable: false, autoDelete: false });
    await channel.bindQueue(queue, topicExchange, 'charges.#');
  });
  afterAll(async () => {
    await adapter?.close();
    if (connection) {
      await deleteQueues(connection, [queue, retryQueue, deadLetterQueue]);
      await channel.deleteExchange(directExchange);
      await channel.deleteExchange(topicExchange);
      await connection.close();
    }
  });

  /** Publishes a charge with `key` in the `idempotency-key` header (none when null). */
  const publish = (charge: Charge, key: string | null = charge.ref) =>
    publishConfirmed(channel, queue, adapter.encode(charge), {
      persistent: true,
      headers: { 'x-test': charge.ref, ...(key !== null && { [IDEMPOTENCY_KEY_MESSAGE_HEADER]: key }) },
    });
  /** Publishes a charge through `exchange` (routing key `routingKey`), keyed by its ref, and waits for the confirm. */
  const publishThrough = (exchange: string, routingKey: string, charge: Charge) =>
    new Promise<void>((resolve, reject) =>
      channel.publish(
        exchange,
        routingKey,
        Buffer.from(JSON.stringify(adapter.encode(charge))),
        { persistent: true, headers: { 'x-test': charge.ref, [IDEMPOTENCY_KEY_MESSAGE_HEADER]: charge.ref } },
        (error: unknown) => (error ? reject(error) : resolve()),
      ),
    );
  const settled = () =>
    waitFor(
      async () => (await readyCount(channel, queue)) === 0 && (await readyCount(channel, retryQueue)) === 0,
      'the queues are empty',
    );
  /** The dead letters of test message `ref` (the dead-letter queue is drained into `deadLetters`). */
  const deadLettersOf = async (ref: string, count = 1): Promise<GetMessage[]> => {
    const of = () => deadLetters.filter((m) => m.properties.headers?.['x-test'] === ref);
    await waitFor(async () => {
      deadLetters.push(...(await drain(channel, deadLetterQueue)));
      return of().length >= count;
    }, `${count} dead letter(s) of ${ref}`);
    return of();
  };
  const reasonOf = (message: GetMessage | ConsumeMessage) =>
    String(message.properties.headers?.[AMQP_DEAD_LETTER_REASON_HEADER]);

  it('a duplicate of a completed message is acknowledged without running the handler (more duplicates than the prefetch)', async () => {
    const ref = randomUUID();
    await publish({ ref, amountCents: 500 });
    await waitFor(() => probe.ran(ref) === 1 && probe.delivered(ref) === 1, 'the first delivery ran');
    for (let i = 0; i < 6; i++) await publish({ ref, amountCents: 500 });
    // Unacknowledged messages would stop the deliveries at the prefetch of 4.
    await waitFor(() => probe.delivered(ref) === 7, 'all 7 deliveries reached the consumer');
    await settled();
    expect(probe.ran(ref)).toBe(1);
    expect(probe.contexts.at(-1)!.fencingToken).toBe(1);
  });

  it('a duplicate while the original runs waits in the retry queue (no hot loop) and is applied once when the original finishes', async () => {
    const ref = randomUUID();
    const open = probe.hold(ref);
    await publish({ ref, amountCents: 700 });
    await waitFor(() => probe.ran(ref) === 1, 'the original runs');
    await publish({ ref, amountCents: 700 });
    await waitFor(async () => (await readyCount(channel, retryQueue)) === 1, 'the duplicate waits in the retry queue');
    expect(probe.delivered(ref)).toBe(2);
    open();
    // Back after the original's remaining lease: replayed, acknowledged.
    await waitFor(() => probe.delivered(ref) === 3, 'the duplicate is delivered again after its delay');
    await settled();
    expect(probe.delivered(ref)).toBe(3);
    expect(probe.ran(ref)).toBe(1);
  });

  it('a transient handler failure releases the key: the message is redelivered after a backoff and runs again', async () => {
    const ref = randomUUID();
    probe.failures.set(ref, [new Error('ledger timeout')]);
    await publish({ ref, amountCents: 900 });
    await waitFor(() => probe.ran(ref) === 2, 'the redelivery ran the handler again');
    await settled();
    expect(probe.delivered(ref)).toBe(2);
  });

  it('two messages through a direct exchange, the first failing once: it is retried and both are handled', async () => {
    const [first, second] = [randomUUID(), randomUUID()];
    probe.failures.set(first, [new Error('ledger timeout')]);
    await publishThrough(directExchange, 'charge', { ref: first, amountCents: 11 });
    await publishThrough(directExchange, 'charge', { ref: second, amountCents: 12 });
    await waitFor(() => probe.ran(first) === 2 && probe.ran(second) === 1, 'both messages were handled');
    await settled();
    expect([probe.delivered(first), probe.delivered(second)]).toEqual([2, 1]);
  });

  it('a message through a topic exchange: a transient failure is retried through the retry queue, then succeeds', async () => {
    const ref = randomUUID();
    probe.failures.set(ref, [new Error('ledger timeout'), new Error('ledger timeout')]);
    await publishThrough(topicExchange, 'charges.eu.card', { ref, amountCents: 13 });
    await waitFor(() => probe.ran(ref) === 3, 'the third delivery ran and succeeded');
    await settled();
    expect(probe.delivered(ref)).toBe(3);
    deadLetters.push(...(await drain(channel, deadLetterQueue)));
    expect(deadLetters.filter((m) => m.properties.headers?.['x-test'] === ref)).toEqual([]);
  });

  it('a final failure (4xx) is stored and acknowledged; a duplicate gets it without running', async () => {
    const ref = randomUUID();
    probe.failures.set(ref, [new UnprocessableEntityException('unknown account')]);
    await publish({ ref, amountCents: 1 });
    await waitFor(() => probe.ran(ref) === 1 && probe.delivered(ref) === 1, 'the first delivery ran');
    await settled();
    await publish({ ref, amountCents: 1 });
    await waitFor(() => probe.delivered(ref) === 2, 'the duplicate was delivered');
    await settled();
    expect(probe.ran(ref)).toBe(1);
    deadLetters.push(...(await drain(channel, deadLetterQueue)));
    expect(deadLetters.filter((m) => m.properties.headers?.['x-test'] === ref)).toEqual([]);
  });

  it('a failure that lasts is retried maxAttempts times, then dead-lettered (attempts-exhausted)', async () => {
    const ref = randomUUID();
    probe.failures.set(ref, [
      new Error('ledger down'),
      new Error('ledger down'),
      new Error('ledger down'),
      new Error('ledger down'),
    ]);
    await publish({ ref, amountCents: 3 });
    const [letter] = await deadLettersOf(ref);
    expect(reasonOf(letter)).toBe('attempts-exhausted');
    expect(letter.properties.headers?.[AMQP_ATTEMPTS_HEADER]).toBe(3);
    expect(letter.properties.headers?.[AMQP_DEAD_LETTER_ERROR_HEADER]).toBe('Error: ledger down');
    expect(letter.properties.headers?.[AMQP_CONSUMER_HEADER]).toBe(CONSUMER);
    expect(probe.ran(ref)).toBe(3);
    expect(probe.delivered(ref)).toBe(3);
  });

  it('poison goes to the dead-letter queue once, with its reason: no key, a body that is not JSON, a key reused with another payload', async () => {
    const before = probe.delivered(undefined);
    const noKey = randomUUID();
    await publish({ ref: noKey, amountCents: 5 }, null);
    const [withoutKey] = await deadLettersOf(noKey);
    expect(reasonOf(withoutKey)).toBe('missing-key');
    expect(probe.delivered(undefined)).toBe(before + 1);
    expect(probe.ran(noKey)).toBe(0);

    const garbled = randomUUID();
    await publishConfirmed(channel, queue, 'this is not JSON {', {
      headers: { 'x-test': garbled, [IDEMPOTENCY_KEY_MESSAGE_HEADER]: garbled },
    });
    const [unparsable] = await deadLettersOf(garbled);
    expect(reasonOf(unparsable)).toBe('unparsable-body');
    expect(unparsable.content.toString()).toBe('this is not JSON {');

    const reused = randomUUID();
    await publish({ ref: reused, amountCents: 100 });
    await waitFor(() => probe.ran(reused) === 1, 'the first payload ran');
    await publish({ ref: reused, amountCents: 200 });
    const [mismatch] = await deadLettersOf(reused);
    expect(reasonOf(mismatch)).toBe('key-reused');
    expect(JSON.stringify(adapter.encode({ ref: reused, amountCents: 200 }))).toBe(mismatch.content.toString());
    await settled();
    expect(probe.ran(reused)).toBe(1);
    expect(probe.delivered(reused)).toBe(2);
  });

  it('every message was acknowledged: once the consumer closes, nothing is left in the queues', async () => {
    await settled();
    await adapter.close();
    adapter = { encode: adapter.encode, close: async () => undefined };
    expect(await readyCount(channel, queue)).toBe(0);
    expect(await readyCount(channel, retryQueue)).toBe(0);
    deadLetters.push(...(await drain(channel, deadLetterQueue)));
    expect(deadLetters.map(reasonOf).sort()).toEqual([
      'attempts-exhausted',
      'key-reused',
      'missing-key',
      'unparsable-body',
    ]);
  });
});
