// `npm run bench [-- --quick]`: compiles the bench (server and driver, with the library) with the
// Nest CLI into node_modules/.cache/bench (Nest needs emitDecoratorMetadata, which tsx-style
// runners do not emit), then runs the driver. See bench/README.md.
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cacheDir = join(repoRoot, 'node_modules/.cache/bench');
const tsconfig = join(cacheDir, 'tsconfig.json');

await mkdir(cacheDir, { recursive: true });
await writeFile(
  tsconfig,
  JSON.stringify({
    extends: '../../../tsconfig.json',
    compilerOptions: { outDir: './dist', sourceMap: false, declaration: false, types: ['node'] },
    include: ['../../../bench/**/*.ts'],
  }),
);
// Under node_modules, Node finds no package scope: say that the output is ESM.
await mkdir(join(cacheDir, 'dist'), { recursive: true });
console.log('building the bench (nest build) ...');
try {
  // The CLI resolves -p against the working directory.
  await promisify(execFile)(
    process.execPath,
    [join(repoRoot, 'node_modules/@nestjs/cli/bin/nest.js'), 'build', 'orders', '-p', relative(repoRoot, tsconfig)],
    { cwd: repoRoot, timeout: 300_000 },
  );
} catch (error) {
  console.error(`nest build failed:\n${error.stdout ?? ''}\n${error.stderr ?? ''}`);
  process.exit(1);
}
await writeFile(join(cacheDir, 'dist/package.json'), '{ "type": "module" }\n');
const { runBench } = await import(pathToFileURL(join(cacheDir, 'dist/bench/driver/main.js')).href);
await runBench({
  repoRoot,
  serverMainJs: join(cacheDir, 'dist/bench/app/main.js'),
  argv: process.argv.slice(2),
});
