/** Whether a provider or controller declares a dependency on a class, as Nest's injector reads it. */
import { PARAMTYPES_METADATA, PROPERTY_DEPS_METADATA, SELF_DECLARED_DEPS_METADATA } from '@nestjs/common/constants.js';
import type { DiscoveryService } from '@nestjs/core';

type InstanceWrapper = ReturnType<DiscoveryService['getProviders']>[number];

/** Constructor parameters (typed or `@Inject()`), properties (`@Inject()`), or a factory's `inject`. */
export function dependsOn(wrapper: InstanceWrapper, dependency: object): boolean {
  const tokens: unknown[] = [];
  const { metatype, inject } = wrapper;
  if (inject) {
    for (const token of inject) tokens.push(typeof token === 'object' && token !== null ? token.token : token);
  } else if (typeof metatype === 'function') {
    tokens.push(...((Reflect.getMetadata(PARAMTYPES_METADATA, metatype) as unknown[] | undefined) ?? []));
    const declared = Reflect.getMetadata(SELF_DECLARED_DEPS_METADATA, metatype) as { param: unknown }[] | undefined;
    const properties = Reflect.getMetadata(PROPERTY_DEPS_METADATA, metatype) as { type: unknown }[] | undefined;
    tokens.push(...(declared ?? []).map((d) => d.param), ...(properties ?? []).map((p) => p.type));
  }
  return tokens.includes(dependency);
}
