import { Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService } from '@nestjs/core';
import type { IdempotencyContextRef } from '../engine/idempotency-context.js';
import { dependsOn } from './dependents.js';
import { currentIdempotencyContext, trackContexts, tracksContexts } from './idempotency-request-context.js';

/**
 * The idempotency context of the request (or `IdempotencyService.run()` call) the calling code
 * runs for, in any service, without passing it down from the handler: the library keeps it in
 * its own `AsyncLocalStorage`, as `ClsService` does. Undefined outside a protected request, and
 * on a protected request that came without a key.
 *
 * The async context is kept only when a provider or controller injects this class (checked at
 * startup): before Node 24 an `AsyncLocalStorage` costs every promise of the process.
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
export class IdempotencyContextAccessor implements OnModuleInit {
  constructor(private readonly discovery: DiscoveryService) {}

  onModuleInit(): void {
    const wrappers = [...this.discovery.getProviders(), ...this.discovery.getControllers()];
    if (wrappers.some((wrapper) => dependsOn(wrapper, IdempotencyContextAccessor))) trackContexts();
  }

  /** The current context, or undefined. */
  get(): IdempotencyContextRef | undefined {
    if (!tracksContexts()) {
      // Looked up at runtime (moduleRef.get()): no class declared the dependency at startup.
      trackContexts();
      new Logger('Idempotency').warn(
        'IdempotencyContextAccessor is used without being injected into a provider or controller: contexts are ' +
          'tracked from now on, requests already running have none. Inject it where it is used.',
      );
    }
    return currentIdempotencyContext();
  }

  /** The current context; throws when the code does not run for a protected request with a key. */
  getOrThrow(): IdempotencyContextRef {
    const context = this.get();
    if (!context) {
      throw new Error(
        'No idempotency context: this code does not run for a request of a protected route that carries an Idempotency-Key (nor inside IdempotencyService.run()).',
      );
    }
    return context;
  }
}
