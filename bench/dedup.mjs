// `npm run bench:dedup [-- --ids N]`: compiles bench/dedup (with the library) with tsc into
// node_modules/.cache/bench-dedup, then measures the EventDeduplicator on a throwaway
// redis-server. See bench/dedup/main.ts for what is measured.
import { execFile } from 'node:child_process';
import { mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cacheDir = join(repoRoot, 'node_modules/.cache/bench-dedup');
const distDir = join(cacheDir, 'dist');
const tsconfig = join(cacheDir, 'tsconfig.json');

await mkdir(distDir, { recursive: true });
await writeFile(
  tsconfig,
  JSON.stringify({
    extends: '../../../tsconfig.json',
    compilerOptions: { outDir: './dist', sourceMap: false, declaration: false, types: ['node'], incremental: true, tsBuildInfoFile: './tsbuildinfo' },
    include: ['../../../bench/dedup/**/*.ts'],
  }),
);
console.log('building the dedup bench (tsc) ...');
try {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  await promisify(execFile)(process.execPath, [tsc, '-p', tsconfig], { cwd: repoRoot, timeout: 300_000 });
} catch (error) {
  console.error(`tsc failed:\n${error.stdout ?? ''}\n${error.stderr ?? ''}`);
  process.exit(1);
}
await writeFile(join(distDir, 'package.json'), '{ "type": "module" }\n');
const aliasDir = join(distDir, 'node_modules/@app/idempotency');
await rm(aliasDir, { recursive: true, force: true });
await mkdir(aliasDir, { recursive: true });
await symlink(join(distDir, 'libs/idempotency/src'), join(aliasDir, 'src'), 'dir');
await writeFile(
  join(aliasDir, 'package.json'),
  JSON.stringify({ name: '@app/idempotency', type: 'module', exports: { '.': './src/index.js', './*': './src/*/index.js' } }),
);
const { runDedupBench } = await import(pathToFileURL(join(distDir, 'bench/dedup/main.js')).href);
await runDedupBench(process.argv.slice(2), join(repoRoot, 'bench/results'));
