import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { checkConsumerOptions, configurationErrorAt } from '../consumers/consumer-options.check.js';
import { IdempotentConsumerHandler } from '../consumers/idempotent-consumer.metadata.js';
import { IdempotentRoute } from '../idempotency.metadata.js';
import { resolvePolicy, type ResolvedModuleSettings } from '../idempotency.options.js';
import { IDEMPOTENCY_SETTINGS } from '../idempotency.tokens.js';
import type { IdempotentOptions } from '../interfaces/idempotency-module-options.interface.js';

/**
 * Resolves the options of every `@Idempotent()` route and every `@IdempotentConsumer()` handler
 * once at startup, so one that cannot keep the contract (say `ttlMs < 2 × leaseMs`, a TTL no
 * store can hold, `onStoreError: 'fail-open'` on a durable route) stops the application from
 * starting instead of failing its first request in production. The message names the handler
 * (`Controller.method`) and the option.
 *
 * A durable route in a module without a `durableStore` is not refused here: one controller may
 * serve modules with and without one (its durable routes then answer a configuration error).
 */
@Injectable()
export class IdempotentRoutesValidator implements OnModuleInit {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    @Inject(IDEMPOTENCY_SETTINGS) private readonly settings: ResolvedModuleSettings,
  ) {}

  onModuleInit(): void {
    for (const { instance, metatype } of this.discovery.getControllers()) {
      if (!instance || typeof metatype !== 'function') {
        continue;
      }
      const prototype = Object.getPrototypeOf(instance) as Record<string, unknown>;
      for (const name of this.scanner.getAllMethodNames(prototype)) {
        const targets: [() => unknown, typeof metatype] = [prototype[name] as () => unknown, metatype];
        const route: IdempotentOptions | undefined = this.reflector.getAllAndOverride(IdempotentRoute, targets);
        if (route) {
          this.check(`@Idempotent() on ${metatype.name}.${name}`, () => resolvePolicy(this.settings.policyOptions, route));
        }
        const consumer: unknown = this.reflector.getAllAndOverride(IdempotentConsumerHandler, targets);
        if (consumer) {
          this.check(`@IdempotentConsumer() on ${metatype.name}.${name}`, () => {
            checkConsumerOptions(consumer, { keyRequired: true, functions: ['onDuplicate', 'mapError'] });
            resolvePolicy(this.settings.policyOptions, (consumer as { options?: IdempotentOptions }).options);
          });
        }
      }
    }
  }

  private check(where: string, validate: () => void): void {
    try {
      validate();
    } catch (error) {
      throw configurationErrorAt(where, error);
    }
  }
}
