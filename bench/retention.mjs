// `npm run bench:retention`: the durable store under a compressed TTL, with its reaper (bench/retention/main.ts).
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildBench } from './build.mjs';

const distDir = await buildBench('bench-retention', 'bench/retention/**/*.ts');
const { runRetentionBench } = await import(pathToFileURL(join(distDir, 'bench/retention/main.js')).href);
await runRetentionBench(process.argv.slice(2));
