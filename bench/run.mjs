// `npm run bench [-- --quick]`: compiles the bench (server and driver, with the library) with tsc
// into node_modules/.cache/bench (Nest needs emitDecoratorMetadata, which tsx-style runners do
// not emit; the build is incremental), then runs the driver. See bench/README.md.
import { execFile } from 'node:child_process';
import { mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cacheDir = join(repoRoot, 'node_modules/.cache/bench');
const distDir = join(cacheDir, 'dist');
const tsconfig = join(cacheDir, 'tsconfig.json');

await mkdir(distDir, { recursive: true });
await writeFile(
  tsconfig,
  JSON.stringify({
    extends: '../../../tsconfig.json',
    compilerOptions: {
      outDir: './dist',
      sourceMap: false,
      declaration: false,
      types: ['node'],
      incremental: true,
      tsBuildInfoFile: './tsbuildinfo',
    },
    include: ['../../../bench/**/*.ts'],
  }),
);
console.log('building the bench (tsc) ...');
try {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  await promisify(execFile)(process.execPath, [tsc, '-p', tsconfig], { cwd: repoRoot, timeout: 300_000 });
} catch (error) {
  console.error(`tsc failed:\n${error.stdout ?? ''}\n${error.stderr ?? ''}`);
  process.exit(1);
}
// Under node_modules, Node finds no package scope: say that the output is ESM.
await writeFile(join(distDir, 'package.json'), '{ "type": "module" }\n');
// tsc leaves the `nestjs-idempotency` path alias as it is: a package in the output's own
// node_modules resolves it (and its entry points) to the compiled library.
const aliasDir = join(distDir, 'node_modules/nestjs-idempotency');
await rm(aliasDir, { recursive: true, force: true });
await mkdir(aliasDir, { recursive: true });
await symlink(join(distDir, 'libs/idempotency/src'), join(aliasDir, 'src'), 'dir');
await writeFile(
  join(aliasDir, 'package.json'),
  JSON.stringify({ name: 'nestjs-idempotency', type: 'module', exports: { '.': './src/index.js', './*': './src/*/index.js' } }),
);
const { runBench } = await import(pathToFileURL(join(distDir, 'bench/driver/main.js')).href);
await runBench({
  repoRoot,
  serverMainJs: join(distDir, 'bench/app/main.js'),
  argv: process.argv.slice(2),
});
