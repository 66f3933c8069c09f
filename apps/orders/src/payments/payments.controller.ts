import { Controller, Get } from '@nestjs/common';
import { TenantId } from '../common/tenant/tenant-id.decorator.js';
import { toPaymentView, type PaymentView } from './payment.view.js';
import { PaymentsService } from './payments.service.js';

@Controller('payments')
export class PaymentsController {
  constructor(private readonly payments: PaymentsService) {}

  /** `GET /payments`: the tenant's charges, newest first. */
  @Get()
  async list(@TenantId() tenantId: string): Promise<PaymentView[]> {
    return (await this.payments.list(tenantId)).map(toPaymentView);
  }
}
