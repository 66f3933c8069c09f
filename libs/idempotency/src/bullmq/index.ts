/**
 * `nestjs-idempotency/bullmq`: the BullMQ adapter. The only part of the library that imports
 * `bullmq`, so an application without it never loads it.
 */
export {
  idempotentProcessor,
  type IdempotentJob,
  type IdempotentJobHandler,
  type IdempotentProcessorOptions,
} from './idempotent-processor.js';
export { isIdempotentJobResultUnavailable, type IdempotentJobResultUnavailable } from './job-result-unavailable.js';
