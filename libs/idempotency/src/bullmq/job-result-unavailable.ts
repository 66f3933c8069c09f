/**
 * The return value of a job whose effect happened but whose result the idempotency record does
 * not hold: the handler ran and its key completed, but JSON cannot hold its value (a `BigInt`, a
 * cycle: `result-unencodable`), or a later job of the same key finds the record completed
 * without it (`replay-unavailable`). The job completes (its effect stands: it must not be
 * enqueued again, and BullMQ does not retry it), with this marker as its value and a line in the
 * job's log, so operators and dashboards see a completed job, never a failure to re-enqueue.
 *
 * @publicApi
 */
export interface IdempotentJobResultUnavailable {
  /** Always `'unavailable'`: tells the marker from a handler's own value. */
  idempotencyResult: 'unavailable';
  reason: 'result-unencodable' | 'replay-unavailable';
  /** The idempotency error's message: why the value is not there. */
  detail: string;
}

/**
 * Whether a job's return value is the `IdempotentJobResultUnavailable` marker (e.g. in a flow's
 * parent job, or a `QueueEvents` listener, before reading the value).
 *
 * @example
 * if (isIdempotentJobResultUnavailable(job.returnvalue)) logger.warn(`job ${job.id}: ${job.returnvalue.detail}`);
 * @publicApi
 */
export function isIdempotentJobResultUnavailable(value: unknown): value is IdempotentJobResultUnavailable {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as Partial<IdempotentJobResultUnavailable>).idempotencyResult === 'unavailable'
  );
}
