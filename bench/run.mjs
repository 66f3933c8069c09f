// `npm run bench [-- --quick]`: builds the library and the bench (server and driver, see
// bench/build.mjs), then runs the driver. See bench/README.md.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildBench, repoRoot, useBenchServerNode } from './build.mjs';

await useBenchServerNode();
const distDir = await buildBench('bench', 'bench/**/*.ts');
const { runBench } = await import(pathToFileURL(join(distDir, 'bench/driver/main.js')).href);
await runBench({
  repoRoot,
  serverMainJs: join(distDir, 'bench/app/main.js'),
  argv: process.argv.slice(2),
});
