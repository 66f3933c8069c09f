import { applyDecorators, UseInterceptors } from '@nestjs/common';
import { IdempotentConsumerInterceptor } from './idempotent-consumer.interceptor.js';
import { IdempotentConsumerHandler } from './idempotent-consumer.metadata.js';
import type { IdempotentConsumerOptions } from './idempotent-consumer.options.js';

/**
 * Makes a Nest microservice handler (`@EventPattern` / `@MessagePattern`) take effect once per
 * message: the key comes from the message, the consumer's name is the scope. A completed
 * duplicate is acknowledged without running the handler (the stored value is returned); a
 * duplicate while the original runs throws a retryable `IdempotencyRunError` (`in-progress`);
 * a failure follows the module's outcome policy. See `IdempotentConsumerInterceptor`.
 *
 * Needs `IdempotencyModule` (global by default) in the microservice's module tree.
 *
 * @example
 * @EventPattern('order.created')
 * @IdempotentConsumer<OrderCreated>({ consumer: 'billing.order-created', key: (event) => event.eventId })
 * async onOrderCreated(@Payload() event: OrderCreated) { await this.billing.open(event); }
 * @publicApi
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- untyped like Nest's @Payload() data and its transport contexts
export const IdempotentConsumer = <TData = any, TContext = any>(options: IdempotentConsumerOptions<TData, TContext>) =>
  applyDecorators(
    IdempotentConsumerHandler(options as IdempotentConsumerOptions),
    UseInterceptors(IdempotentConsumerInterceptor),
  );
