import {
  type CallHandler,
  type ExecutionContext,
  Injectable,
  Logger,
  type NestInterceptor,
  Optional,
} from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { defer, lastValueFrom, type Observable } from 'rxjs';
import type { IdempotencyContextRef } from '../engine/idempotency-context.js';
import type { RunRequest, RunResult } from '../engine/idempotency-engine.types.js';
import { IdempotencyService } from '../engine/idempotency.service.js';
import { reportSettlementFallback } from '../telemetry/settlement-fallbacks.js';
import { ConsumerSettlements } from './consumer-settlements.js';
import { consumerRunRequest } from './consumer-run-request.js';
import { attachConsumerContext } from './idempotency-consumer-context.decorator.js';
import { IdempotentConsumerHandler } from './idempotent-consumer.metadata.js';
import type { IdempotentConsumerOptions } from './idempotent-consumer.options.js';
import { messageDisposition, type ConsumerRunOutcome, type MessageDisposition } from './message-disposition.js';
import { UnparsableMessage, UnparsableMessageError } from './unparsable-message.js';

/**
 * The message-consumer adapter for Nest microservices: on a handler marked
 * `@IdempotentConsumer()`, runs it through `IdempotencyService.run()` once per message key and
 * consumer.
 * - first delivery: the handler runs; its (last) value is stored and returned;
 * - a duplicate of a completed message: the handler does not run; the stored value is returned,
 *   so the transport acknowledges it (and `onDuplicate` is called);
 * - a duplicate while the original still runs: `IdempotencyRunError` `in-progress`
 *   (`retryable: true`, `details.retryAfterSeconds`) is thrown, so the transport hands it back
 *   for redelivery later (map it to your transport's retry signal with `mapError`);
 * - the handler fails: the module's outcome policy decides (a 5xx or any plain error releases
 *   the key, so the redelivery runs again; a 4xx `HttpException` or `IdempotencyFinalException` is
 *   stored, and duplicates get it again as `replayed-failure`), and the error is rethrown.
 * With a `settlement` (RabbitMQ: `rmqSettlement()`), each message is also settled with its
 * broker as `messageDisposition()` says (ack, delayed redelivery, dead letter), and failures are
 * not thrown to the transport; every message is settled, even when `onDuplicate` throws, and a
 * settlement that rejects is logged and counted. A payload the transport could not parse
 * (`UnparsableMessage`) never reaches the handler.
 * Other execution types (HTTP, WebSockets) pass through untouched. Subclass it to change how the
 * request is built (`buildRunRequest`) or how errors leave (`toTransportError`).
 *
 * @publicApi
 */
@Injectable()
export class IdempotentConsumerInterceptor implements NestInterceptor {
  private readonly logger = new Logger('IdempotentConsumer');

  constructor(
    protected readonly idempotency: IdempotencyService,
    protected readonly reflector: Reflector,
    /** This application's prepared settlements (`IdempotencyModule` provides them). */
    @Optional() protected readonly settlements?: ConsumerSettlements,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.getType() !== 'rpc') {
      return next.handle();
    }
    const options: IdempotentConsumerOptions | undefined = this.reflector.getAllAndOverride(IdempotentConsumerHandler, [
      context.getHandler(),
      context.getClass(),
    ]);
    if (!options) {
      return next.handle();
    }
    return defer(() => this.consume(context, next, options));
  }

  /** The run request of this message (by default: the consumer, and the options' key, fingerprint, tenant). */
  protected buildRunRequest(options: IdempotentConsumerOptions, data: unknown, transportContext: unknown): RunRequest {
    return consumerRunRequest(options, data, transportContext);
  }

  /** What the transport sees when `run()` throws (by default: `options.mapError`, or the error itself). */
  protected toTransportError(
    error: unknown,
    options: IdempotentConsumerOptions,
    data: unknown,
    transportContext: unknown,
  ): unknown {
    return options.mapError ? options.mapError(error, data, transportContext) : error;
  }

  private async consume(
    context: ExecutionContext,
    next: CallHandler,
    options: IdempotentConsumerOptions,
  ): Promise<unknown> {
    const rpc = context.switchToRpc();
    const data = rpc.getData<unknown>();
    const transportContext = rpc.getContext<unknown>();
    // What the handler did, as seen from inside run(): tells its own failure from run()'s refusals.
    const handler: { context?: IdempotencyContextRef; failure?: { error: unknown } } = {};
    let request: RunRequest | undefined;
    let result: RunResult<unknown>;
    try {
      if (data instanceof UnparsableMessage) {
        throw new UnparsableMessageError(options.consumer, data.reason);
      }
      request = this.buildRunRequest(options, data, transportContext);
      result = await this.idempotency.run(request, async (idempotency: IdempotencyContextRef) => {
        handler.context = idempotency;
        attachConsumerContext(context, idempotency);
        try {
          return await lastValueFrom(next.handle(), { defaultValue: undefined });
        } catch (error) {
          handler.failure = { error };
          throw error;
        }
      });
    } catch (error) {
      if (!options.settlement) {
        throw this.toTransportError(error, options, data, transportContext);
      }
      const handlerFailed = request !== undefined && handler.failure !== undefined && handler.failure.error === error;
      const outcome: ConsumerRunOutcome = {
        ok: false,
        error,
        handlerOutcome: handlerFailed ? this.idempotency.failureOutcome(request!, error, handler.context) : undefined,
      };
      await this.settle(options, messageDisposition(outcome), data, transportContext, error);
      return undefined;
    }
    if (!options.settlement) {
      if (result.status === 'replayed') await options.onDuplicate?.(data, transportContext);
      return result.value;
    }
    if (result.status === 'replayed') {
      try {
        await options.onDuplicate?.(data, transportContext);
      } catch (error) {
        // The duplicate is settled all the same: a throwing callback must not leave it unacknowledged.
        this.logger.error(`${options.consumer}: onDuplicate failed: ${String(error)}`);
      }
    }
    await this.settle(options, messageDisposition({ ok: true, status: result.status }), data, transportContext);
    return result.value;
  }

  /** Settles with this application's settlement; a rejection is logged and counted, never thrown to the transport. */
  private async settle(
    options: IdempotentConsumerOptions,
    disposition: MessageDisposition,
    data: unknown,
    transportContext: unknown,
    error?: unknown,
  ): Promise<void> {
    const settlement = this.settlements?.of(options.settlement!) ?? options.settlement!;
    try {
      await settlement.settle(disposition, { consumer: options.consumer, data, context: transportContext, error });
    } catch (settleError) {
      reportSettlementFallback({
        consumer: options.consumer,
        action: disposition.action,
        outcome: 'unsettled',
        error: settleError,
      });
    }
  }
}
