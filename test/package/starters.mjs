// The starter apps of the pack-and-consume check (test/package/pack-and-consume.mjs): apps laid out
// as `nest new` lays them out, each with its own tsconfig and its own test runner, that install
// the tarball with the README's command and run their own tests (Jest or Vitest) on every Node.js
// of the run. Plus one CommonJS app that also loads the package as an ES module (the dual-package
// hazard: both faces must give the same classes and injection tokens).

import { APP_MODULE, E2E_SPEC, MAIN_TS, ORDERS_CONTROLLER, UNIT_SPEC } from './starter-sources.mjs';

/** Jest as the Nest 11 starter configures it: package.json "jest", and the e2e config under test/. */
const JEST_UNIT = {
  moduleFileExtensions: ['js', 'json', 'ts'],
  rootDir: 'src',
  testRegex: '.*\\.spec\\.ts$',
  transform: { '^.+\\.(t|j)s$': 'ts-jest' },
  testEnvironment: 'node',
};
const JEST_E2E = {
  moduleFileExtensions: ['js', 'json', 'ts'],
  rootDir: '.',
  testEnvironment: 'node',
  testRegex: '.e2e-spec.ts$',
  transform: { '^.+\\.(t|j)s$': 'ts-jest' },
};

const NEST11_DEPENDENCIES = {
  '@nestjs/common': '^11.1.0',
  '@nestjs/core': '^11.1.0',
  '@nestjs/platform-express': '^11.1.0',
  'reflect-metadata': '^0.2.2',
  rxjs: '^7.8.1',
};
const NEST11_JEST_DEV_DEPENDENCIES = {
  '@nestjs/testing': '^11.1.0',
  '@types/express': '^5.0.0',
  '@types/jest': '^29.5.14',
  '@types/node': '^22.10.7',
  '@types/supertest': '^6.0.2',
  jest: '^29.7.0',
  supertest: '^7.0.0',
  'ts-jest': '^29.2.5',
  typescript: '5.7.3',
};

/** A Nest 11 app with Jest + ts-jest, CommonJS (no "type"), given its tsconfig. */
function nest11JestApp(name, tsconfig, what, supertestImport) {
  return {
    name,
    what,
    packageJson: {
      name,
      private: true,
      scripts: { build: 'tsc -p tsconfig.build.json', test: 'jest', 'test:e2e': 'jest --config ./test/jest-e2e.json' },
      dependencies: NEST11_DEPENDENCIES,
      devDependencies: NEST11_JEST_DEV_DEPENDENCIES,
      jest: JEST_UNIT,
    },
    files: {
      'tsconfig.json': tsconfig,
      'tsconfig.build.json': { extends: './tsconfig.json', exclude: ['node_modules', 'test', 'dist', '**/*spec.ts'] },
      'test/jest-e2e.json': JEST_E2E,
      'src/main.ts': MAIN_TS(''),
      'src/app.module.ts': APP_MODULE(''),
      'src/orders.controller.ts': ORDERS_CONTROLLER(''),
      'src/orders.controller.spec.ts': UNIT_SPEC(''),
      'test/app.e2e-spec.ts': E2E_SPEC('', supertestImport),
    },
    tests: [
      ['test', []],
      ['test:e2e', []],
    ],
  };
}

/** `nest new` for Nest 11: TypeScript 5.7, module nodenext, no "type" (so CommonJS). */
const NEST11_STARTER_TSCONFIG = {
  compilerOptions: {
    module: 'nodenext',
    moduleResolution: 'nodenext',
    resolvePackageJsonExports: true,
    esModuleInterop: true,
    isolatedModules: true,
    declaration: true,
    removeComments: true,
    emitDecoratorMetadata: true,
    experimentalDecorators: true,
    allowSyntheticDefaultImports: true,
    target: 'ES2023',
    sourceMap: true,
    outDir: './dist',
    baseUrl: './',
    incremental: true,
    skipLibCheck: true,
  },
};

/** The older tsconfig of every Nest 10 starter (module commonjs, so moduleResolution node10). */
const COMMONJS_TSCONFIG = {
  compilerOptions: {
    module: 'commonjs',
    declaration: true,
    removeComments: true,
    emitDecoratorMetadata: true,
    experimentalDecorators: true,
    allowSyntheticDefaultImports: true,
    target: 'ES2021',
    sourceMap: true,
    outDir: './dist',
    baseUrl: './',
    incremental: true,
    skipLibCheck: true,
    strictNullChecks: false,
    noImplicitAny: false,
  },
};

/** `nest new` for Nest 12: ESM, TypeScript 6, Vitest with globals. */
const NEST12_STARTER = {
  name: 'nest12-starter',
  what: 'Nest 12 starter: ESM, TypeScript 6, Vitest',
  packageJson: {
    name: 'nest12-starter',
    private: true,
    type: 'module',
    scripts: {
      build: 'tsc -p tsconfig.build.json',
      test: 'vitest run',
      'test:e2e': 'vitest run --config ./vitest.config.e2e.ts',
    },
    dependencies: {
      '@nestjs/common': '^12.0.1',
      '@nestjs/core': '^12.0.1',
      '@nestjs/platform-express': '^12.0.1',
      'reflect-metadata': '^0.2.2',
      rxjs: '^7.8.1',
    },
    devDependencies: {
      '@nestjs/testing': '^12.0.1',
      '@types/express': '^5.0.0',
      '@types/node': '^24.0.0',
      '@types/supertest': '^7.0.0',
      supertest: '^7.0.0',
      typescript: '^6.0.2',
      'vite-tsconfig-paths': '^5.1.4',
      vitest: '^4.1.2',
    },
  },
  files: {
    'tsconfig.json': {
      compilerOptions: {
        module: 'nodenext',
        moduleResolution: 'nodenext',
        resolvePackageJsonExports: true,
        esModuleInterop: true,
        isolatedModules: true,
        declaration: true,
        removeComments: true,
        emitDecoratorMetadata: true,
        experimentalDecorators: true,
        allowSyntheticDefaultImports: true,
        target: 'ES2023',
        sourceMap: true,
        outDir: './dist',
        rootDir: '.',
        incremental: true,
        skipLibCheck: true,
        strict: true,
        strictPropertyInitialization: false,
        types: ['vitest/globals', 'node'],
      },
    },
    'tsconfig.build.json': {
      extends: './tsconfig.json',
      compilerOptions: { rootDir: './src' },
      include: ['src'],
      exclude: ['node_modules', 'test', 'dist', '**/*spec.ts'],
    },
    'vitest.config.ts': vitestConfig('**/*.spec.ts'),
    'vitest.config.e2e.ts': vitestConfig('**/*.e2e-spec.ts'),
    'src/main.ts': MAIN_TS('.js'),
    'src/app.module.ts': APP_MODULE('.js'),
    'src/orders.controller.ts': ORDERS_CONTROLLER(''),
    'src/orders.controller.spec.ts': UNIT_SPEC('.js'),
    'test/app.e2e-spec.ts': E2E_SPEC('.js', "import request from 'supertest';"),
  },
  tests: [
    ['test', []],
    ['test:e2e', []],
  ],
};

function vitestConfig(include) {
  return `import { defineConfig } from 'vitest/config';
import tsconfigPaths from 'vite-tsconfig-paths';

export default defineConfig({
  plugins: [tsconfigPaths()],
  test: { globals: true, root: './', include: ['${include}'] },
});
`;
}

/**
 * A CommonJS Nest 11 app (the starter's tsconfig) with an ES module of its own that imports the
 * package, as an ESM dependency would: the app require()s the CommonJS face and registers the
 * module, the ES module's controller uses the ES face's decorator and injects its
 * IdempotencyService. It prints what it found and serves the route; the check calls it.
 */
const DUAL_LOAD = {
  name: 'nest11-dual-load',
  what: 'Nest 11 CommonJS app with an ES module that imports the package too',
  packageJson: {
    name: 'nest11-dual-load',
    private: true,
    scripts: { build: 'tsc -p tsconfig.json' },
    dependencies: NEST11_DEPENDENCIES,
    devDependencies: { '@types/node': '^22.10.7', typescript: '5.7.3' },
  },
  files: {
    'tsconfig.json': { ...NEST11_STARTER_TSCONFIG, include: ['src'] },
    'src/payments.module.mts': `import { Body, Controller, Module, Post } from '@nestjs/common';
import { Idempotent, IdempotencyService } from 'nestjs-idempotency';

@Controller('payments')
export class PaymentsController {
  constructor(private readonly idempotency: IdempotencyService) {}

  @Post()
  @Idempotent({ required: true })
  pay(@Body() payment: { amount: number }): { amount: number; engineInjected: boolean } {
    return { ...payment, engineInjected: this.idempotency instanceof IdempotencyService };
  }
}

@Module({ controllers: [PaymentsController] })
export class PaymentsModule {}

export { IdempotencyModule as EsmIdempotencyModule, IdempotencyService as EsmIdempotencyService } from 'nestjs-idempotency';
export { MemoryIdempotencyStore as EsmMemoryIdempotencyStore } from 'nestjs-idempotency';
`,
    'src/main.ts': `import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { IdempotencyModule, IdempotencyService, MemoryIdempotencyStore } from 'nestjs-idempotency';

async function main(): Promise<void> {
  const esm = await import('./payments.module.mjs');
  const sameClasses =
    esm.EsmIdempotencyModule === IdempotencyModule &&
    esm.EsmIdempotencyService === IdempotencyService &&
    esm.EsmMemoryIdempotencyStore === MemoryIdempotencyStore;

  @Module({
    imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), scope: ['operation'] }), esm.PaymentsModule],
  })
  class AppModule {}

  const app = await NestFactory.create(AppModule, { rawBody: true, logger: ['error', 'warn'] });
  app.enableShutdownHooks();
  await app.listen(0, '127.0.0.1');
  console.log(\`same classes: \${sameClasses}\`);
  console.log(\`listening on \${await app.getUrl()}\`);
}
void main();
`,
  },
  tests: [],
};

export const STARTERS = [
  nest11JestApp(
    'nest11-starter',
    NEST11_STARTER_TSCONFIG,
    'Nest 11 starter: TypeScript 5.7, nodenext, Jest + ts-jest',
    "import request from 'supertest';",
  ),
  // Without esModuleInterop, as the Nest 10 starter wrote it.
  nest11JestApp(
    'nest11-commonjs',
    COMMONJS_TSCONFIG,
    'Nest 11 app with "module": "commonjs", Jest + ts-jest',
    "import * as request from 'supertest';",
  ),
  NEST12_STARTER,
  DUAL_LOAD,
];
