/**
 * `npm run soak`: the long soak test of the orders service (test/soak), outside the default
 * suite. Same transform as jest.config.cjs; `SOAK_SECONDS` (default 120) bounds the load phase.
 */
const base = require('./jest.config.cjs');

module.exports = {
  ...base,
  testMatch: ['<rootDir>/test/soak/**/*.soak-spec.ts'],
  // Load, then at most 30 s of settling, plus building and starting the service.
  testTimeout: (Number(process.env.SOAK_SECONDS || 120) + 240) * 1000,
};
