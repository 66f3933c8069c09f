import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import type { IdempotencyContextRef } from '../engine/idempotency-context.js';

/** Where the consumer interceptor leaves the context: on the message's transport context object. */
const CONSUMER_CONTEXT = Symbol.for('idempotency.consumer-context');

type Carrier = Record<symbol, IdempotencyContextRef | undefined>;

/** The object of this message that carries its context: the transport context, or the payload. */
function carrierOf(context: ExecutionContext): Carrier | undefined {
  const rpc = context.switchToRpc();
  for (const candidate of [rpc.getContext<unknown>(), rpc.getData<unknown>()]) {
    if (typeof candidate === 'object' && candidate !== null) return candidate as Carrier;
  }
  return undefined;
}

/** @internal Called by `IdempotentConsumerInterceptor` once the message is claimed. */
export function attachConsumerContext(context: ExecutionContext, idempotency: IdempotencyContextRef): void {
  const carrier = carrierOf(context);
  if (carrier) {
    Object.defineProperty(carrier, CONSUMER_CONTEXT, { value: idempotency, configurable: true, enumerable: false });
  }
}

/**
 * Injects the `IdempotencyContextRef` of the message being handled under
 * `@IdempotentConsumer()`: `derivedKey()` for downstream calls, `getManager()` on
 * `transactional` consumers, `setOutcome()`. Undefined outside such a handler.
 *
 * @example
 * @EventPattern('order.created')
 * @IdempotentConsumer({ consumer: 'mailer.order-created', key: (e: OrderCreated) => e.eventId, options: { transactional: true } })
 * async handle(@Payload() event: OrderCreated, @IdempotencyConsumerContext() idem: IdempotencyContextRef) {
 *   await idem.getManager<EntityManager>().insert(Notification, { ... });
 * }
 * @publicApi
 */
export const IdempotencyConsumerContext = createParamDecorator(
  (_data: unknown, context: ExecutionContext): IdempotencyContextRef | undefined =>
    carrierOf(context)?.[CONSUMER_CONTEXT],
);
