import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import { IdempotentRoute } from '../idempotency.metadata.js';
import { resolvePolicy, type ResolvedModuleSettings } from '../idempotency.options.js';
import { IDEMPOTENCY_SETTINGS } from '../idempotency.tokens.js';

/**
 * Resolves the options of every `@Idempotent()` route once at startup, so a route that cannot
 * keep the contract (say `ttlMs < 2 × leaseMs`) stops the application from starting instead of
 * failing its first request in production.
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
        const route = this.reflector.getAllAndOverride(IdempotentRoute, [prototype[name] as () => unknown, metatype]);
        if (!route) {
          continue;
        }
        try {
          resolvePolicy(this.settings.policyOptions, route);
        } catch (error) {
          const reason = error instanceof IdempotencyConfigurationError ? error.message.replace(/^Idempotency configuration: /, '') : String(error);
          throw new IdempotencyConfigurationError(`@Idempotent() on ${metatype.name}.${name}: ${reason}`);
        }
      }
    }
  }
}
