import { Inject, Injectable, Optional, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, ModuleRef, Reflector } from '@nestjs/core';
import { checkConsumerOptions, configurationErrorAt } from './consumers/consumer-options.check.js';
import { ConsumerSettlements } from './consumers/consumer-settlements.js';
import type { MessageSettlement } from './consumers/message-settlement.js';
import { IdempotentConsumerHandler } from './consumers/idempotent-consumer.metadata.js';
import { IdempotentRoute } from './idempotency.metadata.js';
import { IdempotencyConfigurationError } from './errors/idempotency-configuration.error.js';
import { resolvePolicy, type ResolvedModuleSettings, type ResolvedPolicy } from './idempotency.options.js';
import { IDEMPOTENCY_SETTINGS } from './idempotency.tokens.js';
import type { IdempotentOptions } from './interfaces/idempotency-module-options.interface.js';
import { DurableIdempotencyStore } from './stores/durable-idempotency-store.js';

/**
 * Resolves the options of every `@Idempotent()` route and every `@IdempotentConsumer()` handler
 * once at startup, so one that cannot keep the contract (say `ttlMs < 2 × leaseMs`, a TTL no
 * store can hold, `onStoreError: 'fail-open'` on a durable route, `durable` or `transactional`
 * in a module without a `durableStore`) stops the application from starting instead of failing
 * its first request in production. The message names the handler (`Controller.method`) and the
 * option. A consumer's `settlement` is prepared here for this application (`rmqSettlement()`
 * without a queue stops the startup).
 */
@Injectable()
export class IdempotentRoutesValidator implements OnModuleInit {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    private readonly moduleRef: ModuleRef,
    private readonly settlements: ConsumerSettlements,
    @Inject(IDEMPOTENCY_SETTINGS) private readonly settings: ResolvedModuleSettings,
    @Optional() @Inject(DurableIdempotencyStore) private readonly durableStore?: DurableIdempotencyStore | null,
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
          this.check(`@Idempotent() on ${metatype.name}.${name}`, () =>
            this.requireDurableStoreFor(resolvePolicy(this.settings.policyOptions, route)),
          );
        }
        const consumer: unknown = this.reflector.getAllAndOverride(IdempotentConsumerHandler, targets);
        if (consumer) {
          this.check(`@IdempotentConsumer() on ${metatype.name}.${name}`, () => {
            checkConsumerOptions(consumer, { keyRequired: true, functions: ['onDuplicate', 'mapError'] });
            const { options, settlement } = consumer as { options?: IdempotentOptions; settlement?: unknown };
            this.requireDurableStoreFor(resolvePolicy(this.settings.policyOptions, options));
            if (settlement !== undefined) this.prepareSettlement(settlement);
          });
        }
      }
    }
  }

  /**
   * A durable or transactional handler cannot run without the durable tier: refused here rather
   * than by the engine on each request. (A module-wide `durable` is refused with the settings.)
   */
  private requireDurableStoreFor(policy: ResolvedPolicy): void {
    if (policy.durable && !this.durableStore) {
      const option = policy.transactional ? 'transactional' : 'durable';
      throw new IdempotencyConfigurationError(`${option}: true needs a durableStore in IdempotencyModule.`);
    }
  }

  private prepareSettlement(settlement: unknown): void {
    const given = settlement as Partial<MessageSettlement> | null;
    if (typeof given?.settle !== 'function' || (given.prepare !== undefined && typeof given.prepare !== 'function')) {
      throw new IdempotencyConfigurationError(
        'settlement must be a MessageSettlement (an object with settle()), e.g. rmqSettlement({ queue }).',
      );
    }
    this.settlements.prepare(given as MessageSettlement, {
      get: (token) => this.moduleRef.get(token, { strict: false }),
    });
  }

  private check(where: string, validate: () => void): void {
    try {
      validate();
    } catch (error) {
      throw configurationErrorAt(where, error);
    }
  }
}
