import { Inject, Injectable } from '@nestjs/common';
import type { DiscoveryService } from '@nestjs/core';
import { dependsOn } from './dependents.js';

type InstanceWrapper = ReturnType<DiscoveryService['getProviders']>[number];

class Accessor {}
class Other {}

@Injectable()
class ByType {
  constructor(readonly accessor: Accessor) {}
}
@Injectable()
class ByToken {
  constructor(@Inject(Accessor) readonly accessor: unknown) {}
}
@Injectable()
class ByProperty {
  @Inject(Accessor) readonly accessor!: Accessor;
}
@Injectable()
class Unrelated {
  constructor(readonly other: Other) {}
}

const classWrapper = (metatype: object) => ({ metatype, inject: undefined }) as unknown as InstanceWrapper;
const factoryWrapper = (inject: unknown[]) => ({ metatype: () => undefined, inject }) as unknown as InstanceWrapper;

describe('dependsOn', () => {
  it('finds a typed constructor parameter, an @Inject() parameter and an @Inject() property', () => {
    for (const metatype of [ByType, ByToken, ByProperty])
      expect(dependsOn(classWrapper(metatype), Accessor)).toBe(true);
    expect(dependsOn(classWrapper(Unrelated), Accessor)).toBe(false);
  });

  it("finds a factory provider's inject entry, plain or optional", () => {
    expect(dependsOn(factoryWrapper([Other, Accessor]), Accessor)).toBe(true);
    expect(dependsOn(factoryWrapper([{ token: Accessor, optional: true }]), Accessor)).toBe(true);
    expect(dependsOn(factoryWrapper([Other]), Accessor)).toBe(false);
  });
});
