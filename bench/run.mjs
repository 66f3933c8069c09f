// `npm run bench [-- --quick]`: builds the library (libs/idempotency/dist: the bench imports it by
// its package name, `nestjs-idempotency`, as any application does), compiles the bench (server and
// driver) with tsc into node_modules/.cache/bench (Nest needs emitDecoratorMetadata, which
// tsx-style runners do not emit; the build is incremental), then runs the driver. See bench/README.md.
import { execFile } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
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
      // Against the library's published types in its dist/, not its sources.
      customConditions: [],
    },
    include: ['../../../bench/**/*.ts'],
  }),
);
console.log('building the library and the bench (tsc) ...');
try {
  await promisify(execFile)(process.execPath, [join(repoRoot, 'libs/idempotency/scripts/build.mjs')], {
    cwd: repoRoot,
    timeout: 300_000,
  });
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  await promisify(execFile)(process.execPath, [tsc, '-p', tsconfig], { cwd: repoRoot, timeout: 300_000 });
} catch (error) {
  console.error(`build failed:\n${error.stdout ?? ''}\n${error.stderr ?? ''}`);
  process.exit(1);
}
// Under node_modules, Node finds no package scope: say that the output is ESM.
await writeFile(join(distDir, 'package.json'), '{ "type": "module" }\n');
// An alias package older versions of this script left there would shadow the real one.
await rm(join(distDir, 'node_modules'), { recursive: true, force: true });
const { runBench } = await import(pathToFileURL(join(distDir, 'bench/driver/main.js')).href);
await runBench({
  repoRoot,
  serverMainJs: join(distDir, 'bench/app/main.js'),
  argv: process.argv.slice(2),
});
