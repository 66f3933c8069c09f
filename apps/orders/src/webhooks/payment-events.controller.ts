import { Controller, Get, Param } from '@nestjs/common';
import { TenantId } from '../common/tenant/tenant-id.decorator.js';
import type { PaymentEventView } from './payment-event.view.js';
import { PaymentsWebhookService } from './payments-webhook.service.js';

@Controller('payments')
export class PaymentEventsController {
  constructor(private readonly webhooks: PaymentsWebhookService) {}

  /** `GET /payments/:id/events`: the provider events applied to the tenant's payment, oldest first. */
  @Get(':id/events')
  list(@TenantId() tenantId: string, @Param('id') id: string): Promise<PaymentEventView[]> {
    return this.webhooks.listEvents(tenantId, id);
  }
}
