import { UnparsableMessage } from '../consumers/unparsable-message.js';

/** The packet Nest's microservice server routes: a pattern and its data. */
export interface RmqIncomingPacket {
  pattern: string | Record<string, unknown>;
  data: unknown;
  id?: string;
}

const isPacket = (value: unknown): value is RmqIncomingPacket =>
  typeof value === 'object' &&
  value !== null &&
  !Array.isArray(value) &&
  'pattern' in value &&
  (value as RmqIncomingPacket).pattern !== undefined;

/**
 * A `deserializer` for Nest's RabbitMQ server, for a queue with one kind of message: Nest's own
 * packets (`{ pattern, data }`) pass as they are; any other JSON object is the data of
 * `pattern` (a producer that is not Nest); and a body that is not a JSON object becomes an
 * `UnparsableMessage` of `pattern`, which `@IdempotentConsumer()` with `rmqSettlement()`
 * dead-letters as `unparsable-body` without running the handler. (Without it, Nest rejects
 * such a body, as it matches no handler, and the queue's dead-letter arguments route it to the
 * same dead-letter queue, marked only `rejected` by RabbitMQ.)
 *
 * @example
 * app.connectMicroservice({ transport: Transport.RMQ, options: { ..., deserializer: new RmqMessageDeserializer({ pattern: 'order.created' }) } });
 * @publicApi
 */
export class RmqMessageDeserializer {
  constructor(private readonly options: { pattern: string }) {}

  deserialize(value: unknown): RmqIncomingPacket {
    if (isPacket(value)) return value;
    if (typeof value === 'object' && value !== null) return { pattern: this.options.pattern, data: value };
    const raw = typeof value === 'string' ? value : JSON.stringify(value ?? null);
    return { pattern: this.options.pattern, data: new UnparsableMessage('the body is not a JSON object', raw) };
  }
}
