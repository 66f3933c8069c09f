import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';

const PREFIX = /^Idempotency configuration: /;

/**
 * The configuration error of `error`, said of `where` (`@Idempotent() on OrdersController.create`,
 * `idempotentProcessor('mailer.order-created')`), so the message names what to fix and where.
 *
 * @internal
 */
export function configurationErrorAt(where: string, error: unknown): IdempotencyConfigurationError {
  const reason = error instanceof IdempotencyConfigurationError ? error.message.replace(PREFIX, '') : String(error);
  return new IdempotencyConfigurationError(`${where}: ${reason}`);
}

/**
 * Checks what a message adapter (`@IdempotentConsumer()`, `idempotentProcessor()`) was given
 * beyond the policy: the consumer's name and the functions it calls per message. Throws
 * `IdempotencyConfigurationError` naming the option; adapters call it at startup. The policy
 * itself (`options.options`) is checked by `IdempotencyService.policyFor()`.
 *
 * @internal
 */
export function checkConsumerOptions(
  options: unknown,
  rules: { keyRequired: boolean; functions?: readonly string[] },
): void {
  if (typeof options !== 'object' || options === null) {
    throw new IdempotencyConfigurationError(
      `the options must be an object with at least \`consumer\`, got ${String(options)}.`,
    );
  }
  const given = options as Record<string, unknown>;
  const consumer = given.consumer;
  if (typeof consumer !== 'string' || consumer.trim().length === 0) {
    throw new IdempotencyConfigurationError(
      "consumer must be a non-empty string (the operation part of the scope, e.g. 'billing.order-created'), " +
        `got ${JSON.stringify(consumer) ?? String(consumer)}.`,
    );
  }
  if (rules.keyRequired && given.key === undefined) {
    throw new IdempotencyConfigurationError(
      'key is required: a function that returns the message id (an event id, never a broker offset).',
    );
  }
  for (const name of ['key', 'fingerprint', 'tenant', ...(rules.functions ?? [])]) {
    if (given[name] !== undefined && typeof given[name] !== 'function') {
      throw new IdempotencyConfigurationError(`${name} must be a function of the message, got ${typeof given[name]}.`);
    }
  }
  const policy = given.options;
  if (policy !== undefined && (typeof policy !== 'object' || policy === null || Array.isArray(policy))) {
    throw new IdempotencyConfigurationError(`options must be an object of policy options, got ${String(policy)}.`);
  }
}
