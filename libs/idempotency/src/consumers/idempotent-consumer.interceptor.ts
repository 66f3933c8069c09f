import { type CallHandler, type ExecutionContext, Injectable, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { defer, lastValueFrom, type Observable } from 'rxjs';
import type { IdempotencyContextRef } from '../engine/idempotency-context.js';
import type { RunRequest, RunResult } from '../engine/idempotency-engine.types.js';
import { IdempotencyService } from '../engine/idempotency.service.js';
import { consumerRunRequest } from './consumer-run-request.js';
import { attachConsumerContext } from './idempotency-consumer-context.decorator.js';
import { IdempotentConsumerHandler } from './idempotent-consumer.metadata.js';
import type { IdempotentConsumerOptions } from './idempotent-consumer.options.js';
import { messageDisposition, type ConsumerRunOutcome } from './message-disposition.js';
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
 * not thrown to the transport. A payload the transport could not parse (`UnparsableMessage`)
 * never reaches the handler.
 * Other execution types (HTTP, WebSockets) pass through untouched. Subclass it to change how the
 * request is built (`buildRunRequest`) or how errors leave (`toTransportError`).
 *
 * @publicApi
 */
@Injectable()
export class IdempotentConsumerInterceptor implements NestInterceptor {
  constructor(
    protected readonly idempotency: IdempotencyService,
    protected readonly reflector: Reflector,
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
      await options.settlement.settle(messageDisposition(outcome), {
        consumer: options.consumer,
        data,
        context: transportContext,
        error,
      });
      return undefined;
    }
    if (result.status === 'replayed') {
      await options.onDuplicate?.(data, transportContext);
    }
    await options.settlement?.settle(messageDisposition({ ok: true, status: result.status }), {
      consumer: options.consumer,
      data,
      context: transportContext,
    });
    return result.value;
  }
}
