/**
 * A message gave no key to deduplicate it by (`key` returned nothing, or an empty string). The
 * handler did not run. Redelivering will not help: fix the producer, or the `key` function.
 *
 * @publicApi
 */
export class IdempotentConsumerKeyError extends Error {
  constructor(readonly consumer: string) {
    super(
      `The message for consumer "${consumer}" has no idempotency key: make sure the producer sets the id that \`key\` reads, or change \`key\`.`,
    );
    this.name = this.constructor.name;
  }
}
