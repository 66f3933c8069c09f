import { connect, type Channel, type ChannelModel, type ConfirmChannel, type GetMessage } from 'amqplib';

/**
 * RabbitMQ for the e2e suites: the shared broker at `TEST_RABBITMQ_URL` (default
 * `amqp://guest:guest@127.0.0.1:5672`). Suites work on queues of their own (random names) and
 * delete them after. The app's own `RABBITMQ_URL` is what suites pass to the processes they start.
 */
export const TEST_RABBITMQ_URL = process.env.TEST_RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

/** The shared broker's URL (`TEST_RABBITMQ_URL`). */
export function rabbitmqUrl(): string {
  return TEST_RABBITMQ_URL;
}

/** A connection to the broker, or an error that names it and how to start it. The caller closes it. */
export async function connectRabbitOrFail(url: string = rabbitmqUrl()): Promise<ChannelModel> {
  try {
    const connection = await connect(url, { timeout: 3000 });
    connection.on('error', () => undefined);
    return connection;
  } catch (error) {
    const { hostname, port } = new URL(url);
    throw new Error(
      `RabbitMQ not reachable at ${hostname}:${port || 5672}: start it (see README, "Running the tests": ` +
        '`docker compose up -d rabbitmq`, or `rabbitmq-server -detached`, which takes a few seconds to accept connections). ' +
        `Cause: ${(error as Error).message}`,
      { cause: error },
    );
  }
}

/** A confirm channel on `connection` (publishes resolve once the broker has them). */
export async function confirmChannel(connection: ChannelModel): Promise<ConfirmChannel> {
  const channel = await connection.createConfirmChannel();
  channel.on('error', () => undefined);
  return channel;
}

/** Publishes `content` to `queue` and waits for the broker's confirm. */
export async function publishConfirmed(
  channel: ConfirmChannel,
  queue: string,
  content: Buffer | string | object,
  options: Parameters<Channel['sendToQueue']>[2] = {},
): Promise<void> {
  const body = Buffer.isBuffer(content)
    ? content
    : Buffer.from(typeof content === 'string' ? content : JSON.stringify(content));
  await new Promise<void>((resolve, reject) =>
    channel.sendToQueue(queue, body, options, (error: unknown) => (error ? reject(error) : resolve())),
  );
}

/** How many messages are ready in `queue` (not those delivered and unacknowledged). */
export async function readyCount(channel: Channel, queue: string): Promise<number> {
  return (await channel.checkQueue(queue)).messageCount;
}

/** Takes every message ready in `queue` (acknowledged). */
export async function drain(channel: Channel, queue: string): Promise<GetMessage[]> {
  const messages: GetMessage[] = [];
  for (;;) {
    const message = await channel.get(queue, { noAck: true });
    if (message === false) return messages;
    messages.push(message);
  }
}

/** Deletes queues (no error for those already gone). */
export async function deleteQueues(connection: ChannelModel, queues: readonly string[]): Promise<void> {
  const channel = await connection.createChannel();
  channel.on('error', () => undefined);
  for (const queue of queues) await channel.deleteQueue(queue);
  await channel.close();
}

/** Polls `check` every 25 ms until it holds; fails with `what` after `timeoutMs`. */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
