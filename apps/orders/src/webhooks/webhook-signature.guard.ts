import { type CanActivate, type ExecutionContext, Injectable, type RawBodyRequest } from '@nestjs/common';
import { InjectOrdersConfig, type OrdersConfig } from '../config/orders.config.js';
import { ProblemException } from '../common/problem-details/problem-details.js';
import { checkWebhookSignature, SIGNATURE_HEADER } from './webhook-signature.js';

const REFUSALS = {
  missing: 'Sign the raw request body: X-Signature: sha256=<hex HMAC-SHA256 of the body with the shared secret>.',
  malformed: 'X-Signature must be one "sha256=" followed by 64 hexadecimal digits.',
  mismatch: 'X-Signature does not match the request body.',
} as const;

/**
 * Lets a webhook through only when `X-Signature` is the HMAC-SHA256 of the raw body bytes with
 * `WEBHOOK_SECRET`. A guard runs before pipes and the handler, so nothing in the body (its event
 * id included) is read, validated or recorded before the signature is checked. Without a
 * secret the route is closed (503): unverifiable events are never accepted.
 */
@Injectable()
export class WebhookSignatureGuard implements CanActivate {
  constructor(@InjectOrdersConfig('webhooks') private readonly webhooks: OrdersConfig['webhooks']) {}

  canActivate(context: ExecutionContext): boolean {
    const { secret } = this.webhooks;
    if (secret === undefined) {
      throw new ProblemException(
        'webhooksDisabled',
        'WEBHOOK_SECRET is not set on this service, so no event can be verified. Retry later.',
      );
    }
    const request = context
      .switchToHttp()
      .getRequest<RawBodyRequest<{ headers: Record<string, string | string[] | undefined> }>>();
    // `rawBody` is kept by the JSON body parser (`rawBody: true`); another media type has none.
    const check = checkWebhookSignature(request.rawBody ?? Buffer.alloc(0), request.headers[SIGNATURE_HEADER], secret);
    if (check !== 'valid') {
      throw new ProblemException('webhookSignatureInvalid', REFUSALS[check]);
    }
    return true;
  }
}
