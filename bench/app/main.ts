import 'reflect-metadata';
import { writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import { ValidationPipe } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { BenchAppModule } from './bench-app.module.js';
import { benchServerConfigFrom } from './bench-server.js';
import { countDatabaseStatements, databaseRoundTripCount, databaseStatementCount } from './statement-counter.js';

/** Messages between the driver (parent) and a bench server (this process, forked with IPC). */
export type BenchServerMessage =
  | { type: 'listening'; port: number }
  | { type: 'counters'; dbStatements: number; dbRoundTrips: number; cpuMicros: number }
  | { type: 'profiling' }
  | { type: 'profiled'; path: string };

/** What the driver asks a bench server: its counters, or to start / stop a CPU profile (`npm run bench:profile`). */
export type BenchDriverMessage =
  | { type: 'counters' }
  | { type: 'profile-start'; kind: ProfileKind }
  | { type: 'profile-stop'; kind: ProfileKind; path: string };

/** `cpu`: V8's sampling CPU profiler; `heap`: its sampling heap profiler, counting collected objects too (allocation). */
export type ProfileKind = 'cpu' | 'heap';

/**
 * One bench server: listens on a free port of 127.0.0.1, tells the driver the port over IPC,
 * and answers `counters` requests with the number of database statements sent so far and the
 * CPU time it used (user + system).
 */
async function main(): Promise<void> {
  countDatabaseStatements();
  const config = benchServerConfigFrom(process.env);
  const app = await NestFactory.create<NestExpressApplication>(BenchAppModule.forServer(config), {
    rawBody: true,
    logger: ['error', 'warn'],
  });
  app.disable('x-powered-by');
  app.useGlobalPipes(new ValidationPipe({ whitelist: true, forbidNonWhitelisted: true, transform: true }));
  app.enableShutdownHooks();
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as { port: number };
  const send = (message: BenchServerMessage) => process.send?.(message);
  const profiler = new Session();
  process.on('message', (message: BenchDriverMessage) => {
    if (message.type === 'counters') {
      const cpu = process.cpuUsage();
      send({
        type: 'counters',
        dbStatements: databaseStatementCount(),
        dbRoundTrips: databaseRoundTripCount(),
        cpuMicros: cpu.user + cpu.system,
      });
    } else if (message.type === 'profile-start') {
      // Only the measured load is profiled: start-up and module loading would drown it.
      profiler.connect();
      const started =
        message.kind === 'cpu'
          ? profiler.post('Profiler.enable').then(() => profiler.post('Profiler.start'))
          : profiler.post('HeapProfiler.startSampling', {
              samplingInterval: 8192,
              includeObjectsCollectedByMajorGC: true,
              includeObjectsCollectedByMinorGC: true,
            });
      void started.then(() => send({ type: 'profiling' }));
    } else if (message.type === 'profile-stop') {
      const stopped =
        message.kind === 'cpu'
          ? profiler.post('Profiler.stop').then(({ profile }) => profile)
          : profiler.post('HeapProfiler.stopSampling').then(({ profile }) => profile);
      void stopped.then(async (profile) => {
        await writeFile(message.path, JSON.stringify(profile));
        profiler.disconnect();
        send({ type: 'profiled', path: message.path });
      });
    }
  });
  process.on('disconnect', () => void app.close().then(() => process.exit(0)));
  send({ type: 'listening', port: address.port });
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
