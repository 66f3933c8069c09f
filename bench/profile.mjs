// `npm run bench:profile -- <scenario>...`: CPU profiles of bench servers under load, summarized
// (bench/driver/profile.ts, bench/README.md).
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildBench, repoRoot, useBenchServerNode } from './build.mjs';

await useBenchServerNode();
const distDir = await buildBench('bench', 'bench/**/*.ts');
const { runProfile } = await import(pathToFileURL(join(distDir, 'bench/driver/profile.js')).href);
await runProfile({ repoRoot, serverMainJs: join(distDir, 'bench/app/main.js'), argv: process.argv.slice(2) });
