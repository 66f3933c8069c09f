import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Session } from 'node:inspector/promises';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { IdempotencyModule, IdempotencyService } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { startRedisServer } from '../../test/support/servers/redis-server.js';
import { BENCH_ORDER } from './bench-order.js';
import { allocationsOf, type HeapProfile, ranked } from '../driver/profile-summary.js';

/**
 * `npm run bench:engine [-- --ops N --rounds N --concurrency N]`: the engine and the Redis store
 * alone, in one process, without HTTP or Nest's request pipeline: `IdempotencyService.run()`
 * against a throwaway redis-server, `fresh` (a new key per call: claim, run, complete) and
 * `replay` (one key: one claim that answers the stored value). Per call: CPU µs
 * (`process.cpuUsage`, the Redis client included) and bytes allocated (V8's sampling heap
 * profiler, counting what the GC took). Steadier than the HTTP bench on a busy machine: no load
 * generator and no server pipeline share its process. The value stored is the bench route's
 * 310-byte order.
 */

interface Args {
  ops: number;
  rounds: number;
  concurrency: number;
}

function argsFrom(argv: readonly string[]): Args {
  const value = (flag: string, fallback: number) => {
    const at = argv.indexOf(flag);
    const parsed = at >= 0 ? Number(argv[at + 1]) : fallback;
    if (!Number.isInteger(parsed) || parsed <= 0) throw new Error(`${flag} needs a positive integer`);
    return parsed;
  };
  return { ops: value('--ops', 20_000), rounds: value('--rounds', 5), concurrency: value('--concurrency', 10) };
}

/** Runs `call` `ops` times, `concurrency` at a time. */
async function drive(ops: number, concurrency: number, call: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < ops) await call(next++);
    }),
  );
}

interface Measurement {
  opsPerSecond: number;
  cpuMicrosPerOp: number;
}

async function measure(ops: number, concurrency: number, call: (i: number) => Promise<unknown>): Promise<Measurement> {
  const cpu = process.cpuUsage();
  const started = process.hrtime.bigint();
  await drive(ops, concurrency, call);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const used = process.cpuUsage(cpu);
  return { opsPerSecond: ops / seconds, cpuMicrosPerOp: (used.user + used.system) / ops };
}

/** Bytes allocated per call, and the functions that allocate most of them. */
async function allocations(ops: number, concurrency: number, call: (i: number) => Promise<unknown>) {
  const session = new Session();
  session.connect();
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 4096,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  await drive(ops, concurrency, call);
  const { profile } = await session.post('HeapProfiler.stopSampling');
  session.disconnect();
  const { total, byFunction } = allocationsOf(profile as HeapProfile);
  const top = ranked('', byFunction, 8, (bytes) => `     ${Math.round(bytes / ops)} B`).slice(1);
  return { bytesPerOp: total / ops, top };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

export async function runEngineBench(argv: readonly string[]): Promise<void> {
  const args = argsFrom(argv);
  const redis = await startRedisServer({ args: ['--maxmemory-policy', 'noeviction'] });
  @Module({ imports: [IdempotencyModule.forRoot({ store: new RedisIdempotencyStore(redis.url) })] })
  class EngineBenchModule {}
  const app = await NestFactory.createApplicationContext(EngineBenchModule, { logger: ['error', 'warn'] });
  try {
    const engine = app.get(IdempotencyService);
    const replayKey = randomUUID();
    const scenarios = {
      fresh: () => engine.run({ operation: 'bench.fresh', key: randomUUID() }, () => BENCH_ORDER),
      replay: () => engine.run({ operation: 'bench.replay', key: replayKey }, () => BENCH_ORDER),
    };
    await scenarios.replay();
    const results: Record<string, Measurement[]> = { fresh: [], replay: [] };
    for (const call of Object.values(scenarios)) await measure(args.ops / 4, args.concurrency, call);
    for (let round = 0; round < args.rounds; round++) {
      for (const [name, call] of Object.entries(scenarios)) {
        const result = await measure(args.ops, args.concurrency, call);
        results[name]!.push(result);
        console.log(
          `round ${round + 1}/${args.rounds} ${name.padEnd(6)} ${Math.round(result.opsPerSecond)} ops/s, ` +
            `${result.cpuMicrosPerOp.toFixed(1)} CPU µs/op`,
        );
      }
    }
    console.log(`\nmedian of ${args.rounds} rounds, ${args.ops} calls each, ${args.concurrency} at a time:`);
    for (const [name, call] of Object.entries(scenarios)) {
      const allocated = await allocations(args.ops / 2, args.concurrency, call);
      const rounds = results[name]!;
      console.log(
        `  ${name.padEnd(6)} ${Math.round(median(rounds.map((r) => r.opsPerSecond)))} ops/s, ` +
          `${median(rounds.map((r) => r.cpuMicrosPerOp)).toFixed(1)} CPU µs/op, ` +
          `${Math.round(allocated.bytesPerOp)} bytes allocated/op; most by:\n${allocated.top}`,
      );
    }
  } finally {
    await app.close();
    await redis.stop();
  }
}
