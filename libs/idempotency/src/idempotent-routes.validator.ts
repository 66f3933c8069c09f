import { Inject, Injectable, Optional, type OnModuleInit, type Type } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, ModuleRef, Reflector } from '@nestjs/core';
import { checkConsumerOptions, configurationErrorAt } from './consumers/consumer-options.check.js';
import { ConsumerSettlements } from './consumers/consumer-settlements.js';
import type { MessageSettlement } from './consumers/message-settlement.js';
import { IdempotentConsumerHandler } from './consumers/idempotent-consumer.metadata.js';
import { boundIdempotencyInterceptors } from './http/bound-interceptors.js';
import {
  checkDecoratedMethod,
  checkScopeResolvable,
  checkSingleBinding,
  handlerRouteOf,
  refuseNonHttpHandler,
} from './http/route-checks.js';
import { protectedRouteOptions } from './http/route-protection.js';
import { IdempotentRoute, SkipIdempotencyRoute } from './idempotency.metadata.js';
import { IdempotencyConfigurationError } from './errors/idempotency-configuration.error.js';
import { resolvePolicy, type ResolvedModuleSettings, type ResolvedPolicy } from './idempotency.options.js';
import { IDEMPOTENCY_SETTINGS } from './idempotency.tokens.js';
import type { IdempotentOptions } from './interfaces/idempotency-module-options.interface.js';
import { DurableIdempotencyStore } from './stores/durable-idempotency-store.js';

type Method = () => unknown;
type InstanceWrapper = ReturnType<DiscoveryService['getProviders']>[number];

/**
 * Resolves the options of every protected route (`@Idempotent()`, or every POST and PATCH in the
 * global mode) and every `@IdempotentConsumer()` handler once at startup, so one that cannot keep
 * the contract stops the application from starting instead of failing its first request in
 * production: a policy no store can hold (`ttlMs < 2 × leaseMs`, `onStoreError: 'fail-open'` on
 * a durable route, `durable` without a `durableStore`), a scope with a tenant nothing resolves,
 * `@Idempotent()` where it would protect nothing (a method outside `methods`, a message handler,
 * a gateway or resolver), and two different idempotency interceptors on one route. The message
 * names the handler (`Controller.method`), its route, and the fix. A consumer's `settlement` is
 * prepared here for this application (`rmqSettlement()` without a queue stops the startup).
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
    for (const wrapper of this.discovery.getControllers()) {
      const controller = classOf(wrapper);
      if (!controller) continue;
      for (const name of this.scanner.getAllMethodNames(controller.prototype as object)) {
        const handler = (controller.prototype as Record<string, Method>)[name];
        this.checkRoute(controller, name, handler);
        this.checkConsumer(controller, name, handler);
      }
    }
    for (const wrapper of this.discovery.getProviders()) {
      const provider = classOf(wrapper);
      if (provider) this.checkProvider(provider);
    }
  }

  private checkRoute(controller: Type, name: string, handler: Method): void {
    const onHandler: IdempotentOptions | undefined = this.reflector.get(IdempotentRoute, handler);
    const onController: IdempotentOptions | undefined = this.reflector.get(IdempotentRoute, controller);
    const bound = boundIdempotencyInterceptors(handler, controller);
    const route = handlerRouteOf(handler, controller);
    const where = `@Idempotent() on ${controller.name}.${name}${route.label ? ` (${route.label})` : ''}`;
    if (route.method === undefined) {
      if (route.messageHandler && (onHandler || onController || bound.length > 0)) {
        this.check(where, () => refuseNonHttpHandler('message handler'));
      }
      if (onHandler) this.check(where, () => refuseNonHttpHandler('method'));
      return;
    }
    if (onHandler && this.reflector.get(SkipIdempotencyRoute, handler)) {
      this.check(where, () => {
        throw new IdempotencyConfigurationError('@Idempotent() and @SkipIdempotency() on one handler: keep one.');
      });
    }
    this.check(where, () => checkSingleBinding(bound));
    const options = protectedRouteOptions(this.reflector, handler, controller, this.settings.protectAllRoutes);
    if (!options) return;
    const label = onHandler || onController ? where : `protectAllRoutes on ${controller.name}.${name} (${route.label})`;
    this.check(label, () => {
      const policy = resolvePolicy(this.settings.policyOptions, options);
      this.requireDurableStoreFor(policy);
      if (onHandler) checkDecoratedMethod(route, policy);
      // A controller-wide or global policy leaves other methods alone: they pass through (B.1 rule 2).
      if (route.method === 'ALL' || policy.methodSet.has(route.method!)) checkScopeResolvable(policy, this.settings);
    });
  }

  private checkConsumer(controller: Type, name: string, handler: Method): void {
    const consumer: unknown = this.reflector.getAllAndOverride(IdempotentConsumerHandler, [handler, controller]);
    if (!consumer) return;
    this.check(`@IdempotentConsumer() on ${controller.name}.${name}`, () => {
      checkConsumerOptions(consumer, { keyRequired: true, functions: ['onDuplicate', 'mapError'] });
      const { options, settlement } = consumer as { options?: IdempotentOptions; settlement?: unknown };
      this.requireDurableStoreFor(resolvePolicy(this.settings.policyOptions, options));
      if (settlement !== undefined) this.prepareSettlement(settlement);
    });
  }

  /** Gateways, resolvers and other providers: `@Idempotent()` there protects nothing. */
  private checkProvider(provider: Type): void {
    if (this.reflector.get(IdempotentRoute, provider)) {
      this.check(`@Idempotent() on ${provider.name}`, () => refuseNonHttpHandler('provider'));
    }
    for (const name of this.scanner.getAllMethodNames(provider.prototype as object)) {
      const method = (provider.prototype as Record<string, Method>)[name];
      if (this.reflector.get(IdempotentRoute, method)) {
        this.check(`@Idempotent() on ${provider.name}.${name}`, () => refuseNonHttpHandler('provider'));
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

/** The class of a controller or class provider (not a value or factory provider). */
function classOf(wrapper: InstanceWrapper): Type | undefined {
  const { metatype } = wrapper;
  if (wrapper.inject || typeof metatype !== 'function' || !metatype.prototype) return undefined;
  return metatype as Type;
}
