import { Controller, Get, Header } from '@nestjs/common';
import { SkipTenant } from '../common/tenant/skip-tenant.decorator.js';
import { PROMETHEUS_CONTENT_TYPE, PrometheusMetrics } from './prometheus-metrics.js';

/** `GET /metrics`: the OpenTelemetry metrics (the idempotency layer's among them) as Prometheus text. */
@Controller('metrics')
@SkipTenant()
export class MetricsController {
  constructor(private readonly metrics: PrometheusMetrics) {}

  @Get()
  @Header('Content-Type', PROMETHEUS_CONTENT_TYPE)
  @Header('Cache-Control', 'no-store')
  scrape(): Promise<string> {
    return this.metrics.scrape();
  }
}
