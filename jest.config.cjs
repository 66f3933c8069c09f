/**
 * Native-ESM Jest (Node 20 needs --experimental-vm-modules, see package.json "test").
 * Unit specs live beside the code; end-to-end specs under test/ talk to real servers.
 * Suites run in band (package.json) because the e2e suites share one Redis and one PostgreSQL.
 */
module.exports = {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  moduleFileExtensions: ['ts', 'js', 'json'],
  // The library is imported by its package name (an npm workspace). Its `exports` map has a
  // `nestjs-idempotency:source` condition next to `types`/`default`: here (and in tsconfig.json's
  // customConditions) it selects the TypeScript sources, so tests never need a build.
  testEnvironmentOptions: { customExportConditions: ['nestjs-idempotency:source', 'node', 'node-addons'] },
  moduleNameMapper: {
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
  // nestjs-cls and @nestjs-cls/transactional are CommonJS that require ESM-only Nest 12: bridged
  // for Jest on Node 20 (test/support/jest/esm-bridge/bridged.cjs says why and how).
  resolver: '<rootDir>/test/support/jest/esm-bridge/resolver.cjs',
  setupFilesAfterEnv: ['<rootDir>/test/support/jest/esm-bridge/setup.ts'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: '<rootDir>/tsconfig.json' }],
  },
  testMatch: [
    '<rootDir>/libs/**/*.spec.ts',
    '<rootDir>/libs/**/*.e2e-spec.ts',
    '<rootDir>/apps/**/*.spec.ts',
    '<rootDir>/test/**/*.e2e-spec.ts',
  ],
  testTimeout: 30000,
};
