import { Module } from '@nestjs/common';
import { IdempotencyHealthIndicator } from 'nestjs-idempotency/terminus';
import { TerminusModule } from '@nestjs/terminus';
import { HealthController } from './health.controller.js';

@Module({
  imports: [TerminusModule.forRoot({ errorLogStyle: 'pretty' })],
  controllers: [HealthController],
  providers: [IdempotencyHealthIndicator],
})
export class HealthModule {}
