import { Inject, Injectable, Logger, Optional, type OnApplicationBootstrap } from '@nestjs/common';
import { resolvePolicy, type ResolvedModuleSettings } from './idempotency.options.js';
import { IDEMPOTENCY_SETTINGS } from './idempotency.tokens.js';
import type { IdempotencyModuleOptions } from './interfaces/idempotency-module-options.interface.js';
import { DurableIdempotencyStore } from './stores/durable-idempotency-store.js';
import { IdempotencyStore } from './stores/idempotency-store.js';
import { MemoryIdempotencyStore } from './stores/memory-idempotency.store.js';

/**
 * Says once, when the application has started, which tiers, scope and policy are in use (one
 * log line), and warns when the one-process memory store runs with `NODE_ENV=production`: with
 * several instances, a retry that reaches another one runs the handler again.
 */
@Injectable()
export class IdempotencyStartupReport implements OnApplicationBootstrap {
  private readonly logger = new Logger('Idempotency');

  constructor(
    private readonly store: IdempotencyStore,
    @Inject(IDEMPOTENCY_SETTINGS) private readonly settings: ResolvedModuleSettings,
    @Optional() @Inject(DurableIdempotencyStore) private readonly durableStore?: DurableIdempotencyStore | null,
  ) {}

  onApplicationBootstrap(): void {
    this.logger.log(describeSetup(this.store, this.durableStore ?? undefined, this.settings));
    if (this.store instanceof MemoryIdempotencyStore && process.env.NODE_ENV === 'production') {
      this.logger.warn(
        'the memory store keeps keys in this process only, and loses them on restart: with several instances ' +
          '(pods, workers) a retry that reaches another one runs the handler again. Give IdempotencyModule a shared ' +
          'store: `store: new RedisIdempotencyStore(process.env.REDIS_URL)` from nestjs-idempotency/redis.',
      );
    }
  }
}

/**
 * The startup line, e.g. `store RedisIdempotencyStore, durable store none, scope tenant+principal+operation
 * (tenant: resolver, principal: request.user), policy: POST,PATCH, key optional, ttl 86400s, lease 30s,
 * heartbeat 10s, 5xx released, 4xx stored, dead lease: takeover, store down: fail-closed, global mode off`.
 */
export function describeSetup(
  store: IdempotencyStore,
  durableStore: DurableIdempotencyStore | undefined,
  settings: ResolvedModuleSettings,
): string {
  const policy = resolvePolicy(settings.policyOptions);
  const resolvers = [
    `tenant: ${settings.tenant ? 'resolver' : 'none'}`,
    `principal: ${(settings.policyOptions as IdempotencyModuleOptions).principal ? 'resolver' : 'request.user'}`,
  ];
  if (settings.anonymousScope) resolvers.push('anonymous: resolver');
  const seconds = (ms: number) => `${ms / 1000}s`;
  const fastTier = store instanceof MemoryIdempotencyStore ? 'MemoryIdempotencyStore (this process only)' : name(store);
  return [
    `store ${fastTier}`,
    `durable store ${durableStore ? name(durableStore) : 'none'}`,
    `scope ${policy.scope.join('+')} (${resolvers.join(', ')})`,
    `policy: ${policy.methods.join(',')}, key ${policy.required ? 'required' : 'optional'}, ttl ${seconds(policy.ttlMs)}, ` +
      `lease ${seconds(policy.leaseMs)}, heartbeat ${seconds(policy.heartbeatMs)}, ` +
      `5xx ${policy.storeServerErrors ? 'stored' : 'released'}, 4xx ${policy.storeClientErrors ? 'stored' : 'released'}, ` +
      `dead lease: ${policy.staleLock}, store down: ${policy.onStoreError}` +
      (policy.durable ? `, ${policy.transactional ? 'transactional' : 'durable'}` : ''),
    `global mode ${settings.protectAllRoutes ? 'on (every POST/PATCH route unless @SkipIdempotency())' : 'off'}`,
  ].join(', ');
}

function name(store: object): string {
  return store.constructor.name;
}
