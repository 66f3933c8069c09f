import { Controller, Get, Headers, Inject, Optional, ServiceUnavailableException } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  HealthCheck,
  type HealthCheckResult,
  HealthCheckService,
  type HealthIndicatorFunction,
  HealthIndicatorService,
  TypeOrmHealthIndicator,
} from '@nestjs/terminus';
import { IdempotencyHealthIndicator } from 'nestjs-idempotency/terminus';
import type { Redis } from 'ioredis';
import type { DataSource } from 'typeorm';
import { isAdminBearer } from '../admin/admin-token.js';
import { ProblemException } from '../common/problem-details/problem-details.js';
import { SkipTenant } from '../common/tenant/skip-tenant.decorator.js';
import { InjectOrdersConfig, type OrdersConfig } from '../config/orders.config.js';
import { REDIS_CLIENT } from '../redis/redis.constants.js';
import { statusOnly } from './health-status-only.js';

/** How long one backend may take to answer its ping before it counts as down. */
export const HEALTH_PING_TIMEOUT_MS = 1000;

/**
 * `GET /health`: 200 `{"status":"ok","info":{...},"error":{},"details":{...}}` when the
 * database (and Redis, when configured) answer a ping and both idempotency tiers answer theirs;
 * otherwise 503 with a `health-check-failed` problem that carries Terminus' `info`, `error` and
 * `details`.
 *
 * Anyone sees each backend's status (`up` / `down`, and each idempotency tier's), nothing more:
 * a driver's error names hosts and ports. With `Authorization: Bearer <ADMIN_TOKEN>` (when
 * `ADMIN_TOKEN` is set) the same answer carries the details: Terminus' messages, each tier's
 * latency and error. A missing or wrong token is not refused (load balancers probe without
 * one): it gets the anonymous view. Why a backend is down is logged in either case.
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
    @InjectOrdersConfig('admin') private readonly admin: OrdersConfig['admin'],
    @Optional() @Inject(REDIS_CLIENT) private readonly redis?: Redis,
  ) {}

  @Get()
  @HealthCheck()
  async check(@Headers('authorization') authorization?: string) {
    const { token } = this.admin;
    const detailed = token !== undefined && isAdminBearer(authorization, token);
    const checks: HealthIndicatorFunction[] = [
      () => this.database.pingCheck('database', { connection: this.dataSource, timeout: HEALTH_PING_TIMEOUT_MS }),
      () => this.idempotency.isHealthy('idempotency', { timeoutMs: HEALTH_PING_TIMEOUT_MS, details: detailed }),
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
    const shown = (section: Record<string, unknown> | undefined) => (detailed ? section : statusOnly(section));
    let result: HealthCheckResult;
    try {
      result = await this.health.check(checks);
    } catch (error) {
      if (error instanceof ServiceUnavailableException) {
        const {
          info,
          error: failed,
          details,
        } = error.getResponse() as Record<string, Record<string, unknown> | undefined>;
        const down = Object.keys(failed ?? {});
        throw new ProblemException('healthCheckFailed', `Not answering: ${down.join(', ') || 'unknown'}.`, {
          info: shown(info),
          error: shown(failed),
          details: shown(details),
        });
      }
      throw error;
    }
    return { ...result, info: shown(result.info), error: shown(result.error), details: shown(result.details) };
  }
}
