import { Logger, Module, type OnModuleInit } from '@nestjs/common';
import { InjectOrdersConfig, type OrdersConfig } from '../config/orders.config.js';
import { PaymentEventsController } from './payment-events.controller.js';
import { PaymentsWebhookController } from './payments-webhook.controller.js';
import { PaymentsWebhookService } from './payments-webhook.service.js';
import { WebhookSignatureGuard } from './webhook-signature.guard.js';

/** The payment provider's webhooks (`POST /webhooks/payments`) and `GET /payments/:id/events`. */
@Module({
  controllers: [PaymentsWebhookController, PaymentEventsController],
  providers: [PaymentsWebhookService, WebhookSignatureGuard],
})
export class WebhooksModule implements OnModuleInit {
  constructor(@InjectOrdersConfig('webhooks') private readonly webhooks: OrdersConfig['webhooks']) {}

  onModuleInit(): void {
    if (this.webhooks.secret === undefined) {
      new Logger('Webhooks').warn('WEBHOOK_SECRET is not set: POST /webhooks/payments answers 503 webhooks-disabled');
    }
  }
}
