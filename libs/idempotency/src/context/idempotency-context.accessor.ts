import { Injectable } from '@nestjs/common';
import type { IdempotencyContextRef } from '../engine/idempotency-context.js';
import { currentIdempotencyContext } from './idempotency-request-context.js';

/**
 * The idempotency context of the request (or `IdempotencyService.run()` call) the calling code
 * runs for, in any service, without passing it down from the handler: the library keeps it in
 * its own `AsyncLocalStorage`, as `ClsService` does. Undefined outside a protected request, and
 * on a protected request that came without a key.
 *
 * @example
 * @Injectable()
 * export class PaymentsClient {
 *   constructor(private readonly idempotency: IdempotencyContextAccessor) {}
 *   charge(order: Order) {
 *     const key = this.idempotency.get()?.derivedKey('charge'); // same on every retry of the request
 *     return this.provider.charges.create({ amount: order.total }, { idempotencyKey: key });
 *   }
 * }
 * @publicApi
 */
@Injectable()
export class IdempotencyContextAccessor {
  /** The current context, or undefined. */
  get(): IdempotencyContextRef | undefined {
    return currentIdempotencyContext();
  }

  /** The current context; throws when the code does not run for a protected request with a key. */
  getOrThrow(): IdempotencyContextRef {
    const context = currentIdempotencyContext();
    if (!context) {
      throw new Error(
        'No idempotency context: this code does not run for a request of an @Idempotent() route that carries an Idempotency-Key (nor inside IdempotencyService.run()).',
      );
    }
    return context;
  }
}
