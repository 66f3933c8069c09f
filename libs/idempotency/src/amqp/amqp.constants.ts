/**
 * Headers the AMQP adapter writes. A dead-lettered message keeps its body and properties; these
 * say why it was set aside, by which consumer, and where it came from.
 */
/** Why the message was dead-lettered: a `DeadLetterReason` (`missing-key`, `unparsable-body`, ...). @publicApi */
export const AMQP_DEAD_LETTER_REASON_HEADER = 'x-idempotency-dead-letter-reason';
/** The error that made it a dead letter (name and message, at most 500 characters). @publicApi */
export const AMQP_DEAD_LETTER_ERROR_HEADER = 'x-idempotency-error';
/** The consumer that set the message aside, or handed it back for a retry. @publicApi */
export const AMQP_CONSUMER_HEADER = 'x-idempotency-consumer';
/** The queue the message was consumed from. @publicApi */
export const AMQP_ORIGINAL_QUEUE_HEADER = 'x-idempotency-original-queue';
/** How many deliveries of this message failed transiently so far. @publicApi */
export const AMQP_ATTEMPTS_HEADER = 'x-idempotency-attempts';
/** Why the message is waiting in the retry queue: `in-progress` or `transient-failure`. @publicApi */
export const AMQP_RETRY_REASON_HEADER = 'x-idempotency-retry-reason';
