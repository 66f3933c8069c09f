import type { FieldError } from '../common/problem-details/problem-details.js';
import { PAYMENT_EVENT_TYPES, type PaymentEventType } from '../payments/payment-status.js';

/** A provider event this service applies, as read from a verified body. */
export interface PaymentEventInput {
  /** The provider's event id: the idempotency key of its processing. */
  id: string;
  type: PaymentEventType;
  paymentId: string;
}

/**
 * What a verified body holds: an event to apply, an event of a type this service does not
 * handle (acknowledged, not applied), or an invalid body (400).
 */
export type PaymentEventParse =
  | { kind: 'event'; event: PaymentEventInput }
  | { kind: 'unsupported'; id: string; type: string }
  | { kind: 'invalid'; errors: FieldError[] };

/** Provider ids are printable ASCII without spaces (`evt_...`), at most 255 characters (the column). */
const EVENT_ID = /^[\x21-\x7e]{1,255}$/;
const MAX_TYPE_LENGTH = 64;

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * Reads `{"id", "type", "data": {"paymentId"}}` from a body whose signature was checked. Other
 * members are ignored, not refused: providers add fields to their events over time. Pure.
 */
export function parsePaymentEvent(body: unknown): PaymentEventParse {
  if (!isObject(body)) {
    return { kind: 'invalid', errors: [{ field: '', messages: ['the event must be a JSON object'] }] };
  }
  const errors: FieldError[] = [];
  const { id, type, data } = body;
  if (typeof id !== 'string' || !EVENT_ID.test(id)) {
    errors.push({ field: 'id', messages: ['id must be a string of 1 to 255 visible ASCII characters'] });
  }
  if (typeof type !== 'string' || type.length === 0 || type.length > MAX_TYPE_LENGTH) {
    errors.push({ field: 'type', messages: [`type must be a string of 1 to ${MAX_TYPE_LENGTH} characters`] });
  }
  if (errors.length > 0) {
    return { kind: 'invalid', errors };
  }
  if (!(PAYMENT_EVENT_TYPES as readonly string[]).includes(type as string)) {
    return { kind: 'unsupported', id: id as string, type: type as string };
  }
  const paymentId = isObject(data) ? data.paymentId : undefined;
  if (typeof paymentId !== 'string' || paymentId.length === 0 || paymentId.length > 255) {
    return {
      kind: 'invalid',
      errors: [{ field: 'data.paymentId', messages: ['data.paymentId must be a string of 1 to 255 characters'] }],
    };
  }
  return { kind: 'event', event: { id: id as string, type: type as PaymentEventType, paymentId } };
}
