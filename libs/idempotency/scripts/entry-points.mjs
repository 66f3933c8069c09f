// The package's entry points: one line each. `npm run build` (scripts/build.mjs) builds every one
// and writes package.json's `exports`, `typesVersions`, `main` and `types` from this list
// (scripts/package-fields.mjs); `node scripts/package-fields.mjs` rewrites them without a build.
// An entry `x` is the folder src/x/ with an index.ts and is imported as `nestjs-idempotency/x`;
// '.' is src/index.ts, the package itself.
export const ENTRY_POINTS = [
  '.',
  'redis',
  'typeorm',
  'bullmq',
  'terminus',
  'consumers',
  'amqp',
  'admin',
  'telemetry',
  'testing',
  'client',
  'cls',
];
