// `npm run bench:engine`: the engine and the Redis store alone, in-process (bench/engine/main.ts).
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildBench } from './build.mjs';

const distDir = await buildBench('bench-engine', 'bench/engine/**/*.ts');
const { runEngineBench } = await import(pathToFileURL(join(distDir, 'bench/engine/main.js')).href);
await runEngineBench(process.argv.slice(2));
