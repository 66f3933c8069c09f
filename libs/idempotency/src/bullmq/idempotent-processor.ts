import type { Job } from 'bullmq';
import { DelayedError, UnrecoverableError } from 'bullmq';
import type { IdempotencyContextRef } from '../engine/idempotency-context.js';
import type { IdempotencyService } from '../engine/idempotency.service.js';
import { checkConsumerOptions, configurationErrorAt } from '../consumers/consumer-options.check.js';
import { consumerRunRequest } from '../consumers/consumer-run-request.js';
import type { ConsumerIdempotencyOptions } from '../consumers/idempotent-consumer.options.js';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import { IdempotencyRunError } from '../errors/idempotency-run.error.js';
import { IdempotentConsumerKeyError } from '../consumers/idempotent-consumer-key.error.js';
import type { IdempotentJobResultUnavailable } from './job-result-unavailable.js';

/**
 * What the wrapper reads of a job: a BullMQ `Job`, or a plain `{ id, name, data }` when the same
 * processor runs in-process without a queue (no `moveToDelayed`: an in-progress duplicate is
 * then thrown as `IdempotencyRunError`).
 *
 * @publicApi
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the same default as BullMQ's Job<DataType = any>
export type IdempotentJob<TData = any> = Pick<Job<TData>, 'id' | 'name' | 'data'> &
  Partial<Pick<Job<TData>, 'moveToDelayed' | 'log'>>;

/**
 * Options of `idempotentProcessor()`. `key` defaults to the job id, which a stalled job keeps
 * when BullMQ hands it to another worker; prefer an event id from `job.data` when one event may
 * be enqueued twice under two job ids.
 *
 * @publicApi
 */
export interface IdempotentProcessorOptions<TJob extends IdempotentJob = Job> extends Omit<
  ConsumerIdempotencyOptions<TJob>,
  'key'
> {
  /** The job's identity. @default (job) => job.id */
  key?: (job: TJob) => string | undefined;
  /**
   * When a duplicate arrives while the original still runs, the job is moved to the delayed set
   * for the original's remaining lease (`retryAfterSeconds`) times this factor, without using
   * up an attempt. @default 1
   */
  inProgressDelayFactor?: number;
}

/** A BullMQ processor that also receives the idempotency context of the job's run. @publicApi */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the same default as BullMQ's Processor<T, R = any>
export type IdempotentJobHandler<TJob extends IdempotentJob = Job, TResult = any> = (
  job: TJob,
  idempotency: IdempotencyContextRef,
  token?: string,
  signal?: AbortSignal,
) => Promise<TResult>;

/**
 * Wraps a BullMQ processor so each job (by `key`) takes effect once, even when BullMQ delivers
 * it again: after a worker crash (a stalled job goes back to `wait`), a retry, or a second
 * enqueue of the same event.
 * - first run: `handler` runs; its value is stored and is the job's return value;
 * - a completed duplicate: `handler` does not run; the stored value is returned, so the job
 *   completes without effect;
 * - a duplicate while the original still runs (or its dead worker's lease has not lapsed yet):
 *   the job is moved to the delayed set until the lease can have lapsed (`DelayedError`: no
 *   attempt is used up), then runs again: the engine replays what completed, or takes over a
 *   dead run (on `transactional` runs its uncommitted writes were rolled back, so this is safe);
 * - `handler` fails: the error is rethrown and the outcome policy decides the key. A released
 *   failure (any plain error, a 5xx) lets BullMQ's retry (per `attempts` / `backoff`) run the
 *   handler again. A stored failure (a 4xx `HttpException`, `IdempotencyFinalException`) is replayed
 *   to every later delivery as an `UnrecoverableError`, which ends the retries;
 * - the handler ran but JSON cannot hold its value (`result-unencodable`), or a later job of the
 *   key finds it completed without its value (`replay-unavailable`): the effect happened, so the
 *   job completes with the `IdempotentJobResultUnavailable` marker as its value and a line in its
 *   log (never a failed job, which would invite a re-enqueue);
 * - a job without a key, a key reused with another fingerprint, or an outcome recorded as unknown:
 *   `UnrecoverableError`. A store that is down: the error is rethrown (retried per `attempts`).
 *
 * The options are checked when it is called (at startup, where the worker is built): a bad one
 * throws `IdempotencyConfigurationError` naming the consumer and the option.
 *
 * @example
 * new Worker('orders', idempotentProcessor(idempotency, { consumer: 'mailer.order-created', key: (job) => job.data.eventId,
 *   options: { transactional: true } }, async (job, idem) => {
 *     await idem.getManager<EntityManager>().insert(Notification, { orderId: job.data.orderId });
 *   }), { connection });
 * @publicApi
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- as BullMQ's Processor<T, R = any>, also when only TJob is given
export function idempotentProcessor<TJob extends IdempotentJob = Job, TResult = any>(
  idempotency: IdempotencyService,
  options: IdempotentProcessorOptions<TJob>,
  handler: IdempotentJobHandler<TJob, TResult>,
): (job: TJob, token?: string, signal?: AbortSignal) => Promise<TResult | IdempotentJobResultUnavailable> {
  checkProcessorOptions(idempotency, options);
  const consumerOptions: ConsumerIdempotencyOptions<TJob> = { ...options, key: options.key ?? ((job) => job.id) };
  const delayFactor = options.inProgressDelayFactor ?? 1;
  return async (job, token, signal) => {
    try {
      const { value } = await idempotency.run(consumerRunRequest(consumerOptions, job), (context) =>
        handler(job, context, token, signal),
      );
      return value;
    } catch (error) {
      if (error instanceof IdempotentConsumerKeyError) {
        throw new UnrecoverableError(error.message);
      }
      if (!(error instanceof IdempotencyRunError)) {
        throw error;
      }
      if (error.kind === 'result-unencodable' || error.kind === 'replay-unavailable') {
        const marker: IdempotentJobResultUnavailable = {
          idempotencyResult: 'unavailable',
          reason: error.kind,
          detail: error.message,
        };
        await job.log?.(
          `${options.consumer}: completed; its effect happened, but its result is not stored (${error.kind}): do not enqueue it again`,
        );
        return marker;
      }
      if (error.retryable && token !== undefined && job.moveToDelayed) {
        const delayMs = Math.max(1, error.details.retryAfterSeconds ?? 1) * 1000 * delayFactor;
        await job.moveToDelayed(Date.now() + delayMs, token);
        throw new DelayedError(
          `${options.consumer}: the job's key is still being processed; retrying in ${delayMs} ms`,
        );
      }
      throw error.retryable ? error : new UnrecoverableError(`${options.consumer}: ${error.message} (${error.kind})`);
    }
  };
}

/** Checks the options once, when the processor is built, so a bad one stops the startup. */
function checkProcessorOptions<TJob extends IdempotentJob>(
  idempotency: IdempotencyService,
  options: IdempotentProcessorOptions<TJob>,
): void {
  const consumer = (options as { consumer?: unknown } | null | undefined)?.consumer;
  try {
    checkConsumerOptions(options, { keyRequired: false });
    const factor = options.inProgressDelayFactor;
    if (factor !== undefined && !(typeof factor === 'number' && Number.isFinite(factor) && factor > 0)) {
      throw new IdempotencyConfigurationError(
        `inProgressDelayFactor must be a positive finite number, got ${String(factor)}.`,
      );
    }
    idempotency.policyFor(options.options);
  } catch (error) {
    throw configurationErrorAt(
      `idempotentProcessor(${typeof consumer === 'string' && consumer.trim() ? `'${consumer}'` : ''})`,
      error,
    );
  }
}
