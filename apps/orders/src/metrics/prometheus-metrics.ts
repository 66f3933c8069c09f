import { Injectable, Logger, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { metrics } from '@opentelemetry/api';
import { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';

/** The Prometheus text exposition format the serializer writes. */
export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/**
 * The service's OpenTelemetry metrics SDK: a `MeterProvider` whose only reader is the Prometheus
 * exporter, registered as the global provider at startup. The idempotency library records
 * through `@opentelemetry/api` alone, so this registration is what makes its instruments live.
 * The exporter's own HTTP server is not started: `GET /metrics` serves the same text through
 * Nest (same port, same guards and filters).
 */
@Injectable()
export class PrometheusMetrics implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger('Metrics');
  private readonly exporter = new PrometheusExporter({ preventServerStart: true });
  private readonly serializer = new PrometheusSerializer();
  private readonly provider = new MeterProvider({ readers: [this.exporter] });
  private registered = false;

  onModuleInit(): void {
    this.registered = metrics.setGlobalMeterProvider(this.provider);
    if (!this.registered) {
      // Another provider is global already (two apps in one process): this one serves what it has.
      this.logger.warn(
        "a global MeterProvider is already registered: GET /metrics serves only this app's own provider",
      );
    }
  }

  /** Current values of every instrument, in the Prometheus text format. */
  async scrape(): Promise<string> {
    const { resourceMetrics, errors } = await this.exporter.collect();
    for (const error of errors) this.logger.warn(`metric collection: ${String(error)}`);
    return this.serializer.serialize(resourceMetrics);
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.registered) metrics.disable();
    this.registered = false;
    await this.provider.shutdown();
  }
}
