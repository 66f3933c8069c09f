// Builds what a bench script runs: the library (libs/idempotency/dist: benches import it by its
// package name, `nestjs-idempotency`, as any application does), then the given bench sources with
// tsc into node_modules/.cache/<name> (incrementally; Nest needs emitDecoratorMetadata, which
// tsx-style runners do not emit). Exits the process with the compiler's output when a build fails.
import { execFile } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * @param {string} name the cache folder under node_modules/.cache
 * @param {string} include the sources to compile, relative to the repository root (a glob)
 * @returns {Promise<string>} the output folder (its `bench/...` mirrors the sources)
 */
export async function buildBench(name, include) {
  const cacheDir = join(repoRoot, 'node_modules/.cache', name);
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
      include: [`../../../${include}`],
    }),
  );
  console.log(`building the library and ${include} (tsc) ...`);
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
  // An alias package older versions of these scripts left there would shadow the real one.
  await rm(join(distDir, 'node_modules'), { recursive: true, force: true });
  return distDir;
}

/**
 * Node.js 24, the project's runtime, for the bench servers (BENCH_NODE picks another version spec,
 * e.g. `BENCH_NODE=22`): a binary from the npm registry (test/package/node-binaries.mjs), handed to
 * the driver in BENCH_SERVER_NODE, with which bench/driver/servers.ts forks every server.
 */
export async function useBenchServerNode(spec = process.env.BENCH_NODE ?? '24') {
  const { nodeBinary } = await import('../test/package/node-binaries.mjs');
  const binary = await nodeBinary(spec);
  process.env.BENCH_SERVER_NODE = binary;
  const { stdout } = await promisify(execFile)(binary, ['--version']);
  console.log(`[bench] servers run on Node.js ${stdout.trim()} (${binary})`);
  return stdout.trim();
}
