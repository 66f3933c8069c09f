import 'reflect-metadata';
import { ValidationPipe } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { BenchAppModule } from './bench-app.module.js';
import { benchServerConfigFrom } from './bench-server.js';
import { countDatabaseStatements, databaseStatementCount } from './statement-counter.js';

/** Messages between the driver (parent) and a bench server (this process, forked with IPC). */
export type BenchServerMessage =
  { type: 'listening'; port: number } | { type: 'counters'; dbStatements: number; cpuMicros: number };

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
  process.on('message', (message: { type?: string }) => {
    if (message.type !== 'counters') return;
    const cpu = process.cpuUsage();
    send({ type: 'counters', dbStatements: databaseStatementCount(), cpuMicros: cpu.user + cpu.system });
  });
  process.on('disconnect', () => void app.close().then(() => process.exit(0)));
  send({ type: 'listening', port: address.port });
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
