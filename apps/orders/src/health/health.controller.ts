import { Controller, Get, Inject, Optional, ServiceUnavailableException } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  HealthCheck,
  HealthCheckService,
  type HealthIndicatorFunction,
  HealthIndicatorService,
  TypeOrmHealthIndicator,
} from '@nestjs/terminus';
import { IdempotencyHealthIndicator } from 'nestjs-idempotency/terminus';
import type { Redis } from 'ioredis';
import type { DataSource } from 'typeorm';
import { ProblemException } from '../common/problem-details/problem-details.js';
import { SkipTenant } from '../common/tenant/skip-tenant.decorator.js';
import { REDIS_CLIENT } from '../redis/redis.constants.js';

/** How long one backend may take to answer its ping before it counts as down. */
export const HEALTH_PING_TIMEOUT_MS = 1000;

/**
 * `GET /health`: 200 `{"status":"ok","info":{...},"error":{},"details":{...}}` when the
 * database (and Redis, when configured) answer a ping and both idempotency tiers answer theirs
 * (`idempotency`: fast and durable, with their latency); otherwise 503 with a
 * `health-check-failed` problem that carries Terminus' `info`, `error` and `details`.
 */
@Controller('health')
@SkipTenant()
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly database: TypeOrmHealthIndicator,
    private readonly indicators: HealthIndicatorService,
    private readonly idempotency: IdempotencyHealthIndicator,
    @InjectDataSource() private readonly dataSource: DataSource,
    @Optional() @Inject(REDIS_CLIENT) private readonly redis?: Redis,
  ) {}

  @Get()
  @HealthCheck()
  async check() {
    const checks: HealthIndicatorFunction[] = [
      () => this.database.pingCheck('database', { connection: this.dataSource, timeout: HEALTH_PING_TIMEOUT_MS }),
      () => this.idempotency.isHealthy('idempotency', { timeoutMs: HEALTH_PING_TIMEOUT_MS }),
    ];
    const redis = this.redis;
    if (redis) {
      checks.push(() =>
        this.indicators
          .check('redis')
          .attempt(async () => {
            await redis.ping();
          })
          .withTimeout(HEALTH_PING_TIMEOUT_MS),
      );
    }
    try {
      return await this.health.check(checks);
    } catch (error) {
      if (error instanceof ServiceUnavailableException) {
        const { info, error: failed, details } = error.getResponse() as Record<string, unknown>;
        const down = Object.keys((failed as Record<string, unknown> | undefined) ?? {});
        throw new ProblemException('healthCheckFailed', `Not answering: ${down.join(', ') || 'unknown'}.`, {
          info,
          error: failed,
          details,
        });
      }
      throw error;
    }
  }
}
