/**
 * Native-ESM Jest (Node 20 needs --experimental-vm-modules, see package.json "test").
 * Unit specs live beside the code; end-to-end specs under test/ talk to real servers.
 * Suites run in band (package.json) because the e2e suites share one Redis and one PostgreSQL.
 */
module.exports = {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  moduleFileExtensions: ['ts', 'js', 'json'],
  moduleNameMapper: {
    '^@app/idempotency$': '<rootDir>/libs/idempotency/src/index.ts',
    '^@app/idempotency/(.*)$': '<rootDir>/libs/idempotency/src/$1/index.ts',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
  transform: {
    '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: '<rootDir>/tsconfig.json' }],
  },
  testMatch: [
    '<rootDir>/libs/**/*.spec.ts',
    '<rootDir>/apps/**/*.spec.ts',
    '<rootDir>/test/**/*.e2e-spec.ts',
  ],
  testTimeout: 30000,
};
