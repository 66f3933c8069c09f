/**
 * The message header that carries an idempotency key from a producer to its consumers, e.g. the
 * `derivedKey()` of the HTTP request that published the message. Header names of AMQP and Kafka
 * are case-sensitive: use this exact, lower-case name on both sides.
 *
 * @publicApi
 */
export const IDEMPOTENCY_KEY_MESSAGE_HEADER = 'idempotency-key';
