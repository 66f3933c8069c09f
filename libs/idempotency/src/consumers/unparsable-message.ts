/**
 * What a transport adapter hands over instead of a payload it could not parse (a body that is
 * not JSON, or not an object): `@IdempotentConsumer()` turns it into an `UnparsableMessageError`
 * without running the handler, and a `settlement` dead-letters it.
 *
 * @publicApi
 */
export class UnparsableMessage {
  constructor(
    /** Why it could not be parsed, e.g. `'the body is not JSON'`. */
    readonly reason: string,
    /** The body as received. */
    readonly raw: Buffer | string,
  ) {}
}

/**
 * A message whose body could not be parsed. The handler did not run; redelivering will not
 * help: it goes to the dead-letter queue, for a person to look at.
 *
 * @publicApi
 */
export class UnparsableMessageError extends Error {
  constructor(
    readonly consumer: string,
    readonly reason: string,
  ) {
    super(
      `The message for consumer "${consumer}" cannot be parsed (${reason}): fix the producer; the message is not retried.`,
    );
    this.name = this.constructor.name;
  }
}
