import {
  Body,
  Controller,
  HttpCode,
  HttpException,
  Post,
  Req,
  Res,
  UseGuards,
  type RawBodyRequest,
} from '@nestjs/common';
import { IdempotencyRunError, IdempotencyStoreError } from 'nestjs-idempotency';
import { ProblemException } from '../common/problem-details/problem-details.js';
import { SkipTenant } from '../common/tenant/skip-tenant.decorator.js';
import { validationProblem } from '../common/validation/validation.pipe.js';
import { parsePaymentEvent } from './payment-event.js';
import { PaymentsWebhookService, type WebhookReceipt } from './payments-webhook.service.js';
import { WebhookSignatureGuard } from './webhook-signature.guard.js';

/** The part of Express' and Fastify's response objects the controller uses. */
interface HeaderSink {
  header(name: string, value: string): unknown;
}

/** How long a provider should wait before it delivers again after a 409 or 503, in seconds. */
const RETRY_AFTER_SECONDS = 5;

/**
 * `POST /webhooks/payments`: the payment provider's signed events. No `X-Tenant-ID` (the tenant
 * is the one of the payment the event names; a request that sends one is treated the same).
 */
@Controller('webhooks')
@SkipTenant()
export class PaymentsWebhookController {
  constructor(private readonly webhooks: PaymentsWebhookService) {}

  /**
   * 200 `{"received":true,"duplicate":false}` when the event was applied now,
   * `{"received":true,"duplicate":true}` when this event id was applied before (nothing done),
   * `{"received":true,"duplicate":false,"ignored":true}` for an event type this service does not
   * handle. 401 for a missing or wrong signature, 404 for an unknown payment (not recorded),
   * 422 for another body under an applied event id, 409 / 503 with `Retry-After` to come back later.
   */
  @Post('payments')
  @HttpCode(200)
  @UseGuards(WebhookSignatureGuard)
  async receive(
    @Body() body: unknown,
    @Req() request: RawBodyRequest<object>,
    @Res({ passthrough: true }) response: HeaderSink,
  ): Promise<WebhookReceipt> {
    const parsed = parsePaymentEvent(body);
    if (parsed.kind === 'invalid') {
      throw validationProblem(parsed.errors, 'The event is not a valid payment event.');
    }
    if (parsed.kind === 'unsupported') {
      return { received: true, duplicate: false, ignored: true };
    }
    try {
      return await this.webhooks.receive(parsed.event, request.rawBody ?? Buffer.alloc(0));
    } catch (error) {
      throw this.toHttpError(error, response);
    }
  }

  private toHttpError(error: unknown, response: HeaderSink): unknown {
    if (error instanceof IdempotencyStoreError) {
      response.header('Retry-After', String(RETRY_AFTER_SECONDS));
      return new ProblemException(
        'storeUnavailable',
        'The event could not be checked against the events already applied. Deliver it again later.',
      );
    }
    if (!(error instanceof IdempotencyRunError)) {
      return error;
    }
    switch (error.kind) {
      case 'in-progress':
        response.header('Retry-After', String(error.details.retryAfterSeconds ?? RETRY_AFTER_SECONDS));
        return new ProblemException(
          'webhookEventInProgress',
          'This event is still being applied. Deliver it again later.',
        );
      case 'key-reused':
        return new ProblemException(
          'webhookEventReused',
          'An event with this id and a different body was already applied.',
        );
      case 'replayed-failure':
        return new HttpException(error.details.body ?? 'Error', error.details.status ?? 500);
      default:
        return error;
    }
  }
}
