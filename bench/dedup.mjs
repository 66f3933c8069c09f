// `npm run bench:dedup [-- --ids N]`: builds the library and bench/dedup (see bench/build.mjs),
// then measures the EventDeduplicator on a throwaway redis-server. See bench/dedup/main.ts for
// what is measured.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildBench, repoRoot } from './build.mjs';

const distDir = await buildBench('bench-dedup', 'bench/dedup/**/*.ts');
const { runDedupBench } = await import(pathToFileURL(join(distDir, 'bench/dedup/main.js')).href);
await runDedupBench(process.argv.slice(2), join(repoRoot, 'bench/results'));
