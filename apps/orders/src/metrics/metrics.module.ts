import { Module } from '@nestjs/common';
import { MetricsController } from './metrics.controller.js';
import { PrometheusMetrics } from './prometheus-metrics.js';

/** Registers the OpenTelemetry metrics SDK for the service and serves `GET /metrics`. */
@Module({
  controllers: [MetricsController],
  providers: [PrometheusMetrics],
})
export class MetricsModule {}
