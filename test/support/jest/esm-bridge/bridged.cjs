/**
 * Jest on Node 20 cannot `require()` an ES module (Node itself can since 20.19, Jest only from
 * Node 24.9). `nestjs-cls` and `@nestjs-cls/transactional` are CommonJS and require the ESM-only
 * `@nestjs/common` and `@nestjs/core` 12. The resolver (resolver.cjs) sends those requires to the
 * small files beside this one, which hand back the ES module that setup.ts has already imported:
 * the very instance the ESM code sees, so classes and DI tokens are one.
 */
const BRIDGED = {
  '@nestjs/common': 'nestjs-common.cjs',
  '@nestjs/core': 'nestjs-core.cjs',
  '@nestjs/core/injector/injector': 'nestjs-core-injector.cjs',
  '@nestjs/core/errors/exceptions/unknown-dependencies.exception': 'nestjs-core-unknown-dependencies.cjs',
};

const slot = (request) => Symbol.for(`nestjs-idempotency.jest.esm-bridge:${request}`);

/** The ES module setup.ts imported for `request`, or a clear error when the setup did not run. */
function bridged(request) {
  const namespace = globalThis[slot(request)];
  if (!namespace) {
    throw new Error(
      `${request} was required from CommonJS, but test/support/jest/esm-bridge/setup.ts did not load it: ` +
        'add it to setupFilesAfterEnv in the Jest config.',
    );
  }
  return namespace;
}

module.exports = { BRIDGED, slot, bridged };
