#!/usr/bin/env node
/**
 * `node bench/flow-attribution.mjs [--node <binary> ...]`: what attributing writes by async flow
 * costs (docs/contract.md B.7 rule 17a: every claimed request runs its handler under an
 * `AsyncLocalStorage`, as `http/handler-settlement.ts` does), on this Node and on each `--node`
 * binary (`npm run compat` installs Node 22 and 24 into node_modules/.cache/node-binaries).
 *
 * A "request" here is a chain of awaited promises about as long as a fresh request's in Nest (the
 * pipeline, the handler, the store calls): 60 awaits. Three runs per Node, 100 000 requests each,
 * sequential, after a warm-up:
 * - `off`: no storage enabled (a process with no claimed request in flight);
 * - `in flow`: each request inside `run()` of an enabled storage (a claimed request);
 * - `beside a flow`: the storage enabled but the request outside it (every other request of the
 *   process while a claimed one is in flight: before Node 24 the async hooks cost every promise).
 * Prints nanoseconds per request and the extra per request over `off` (median of 5 repetitions).
 */
import { execFileSync } from 'node:child_process';
import { AsyncLocalStorage } from 'node:async_hooks';
import { fileURLToPath } from 'node:url';

const AWAITS_PER_REQUEST = 60;
const REQUESTS = 100_000;
const REPETITIONS = 5;

async function step(i) {
  return i + 1;
}

async function request() {
  let value = 0;
  for (let i = 0; i < AWAITS_PER_REQUEST; i++) value = await step(value);
  return value;
}

async function timePerRequest(run) {
  const start = process.hrtime.bigint();
  for (let i = 0; i < REQUESTS; i++) await run();
  return Number(process.hrtime.bigint() - start) / REQUESTS;
}

async function median(run) {
  const samples = [];
  for (let i = 0; i < REPETITIONS; i++) samples.push(await timePerRequest(run));
  samples.sort((a, b) => a - b);
  return samples[Math.floor(REPETITIONS / 2)];
}

async function measureHere() {
  const storage = new AsyncLocalStorage();
  const token = {};
  await timePerRequest(request); // warm-up
  const off = await median(request);
  const inFlow = await median(() => storage.run(token, request));
  // Enabled (a claimed request somewhere holds it open), this request outside it.
  storage.enterWith(undefined);
  const beside = await median(request);
  storage.disable();
  return { node: process.version, off, inFlow, beside };
}

if (process.argv.includes('--child')) {
  process.stdout.write(JSON.stringify(await measureHere()));
} else {
  const binaries = [process.execPath];
  for (let i = 2; i < process.argv.length; i++) if (process.argv[i] === '--node') binaries.push(process.argv[++i]);
  const script = fileURLToPath(import.meta.url);
  console.log('| Node | off ns/req | in flow ns/req (+) | beside a flow ns/req (+) |');
  console.log('|---|---:|---:|---:|');
  for (const binary of binaries) {
    const r = JSON.parse(execFileSync(binary, [script, '--child'], { encoding: 'utf8' }));
    const plus = (value) => `${Math.round(value)} (+${Math.round(value - r.off)})`;
    console.log(`| ${r.node} | ${Math.round(r.off)} | ${plus(r.inFlow)} | ${plus(r.beside)} |`);
  }
}
