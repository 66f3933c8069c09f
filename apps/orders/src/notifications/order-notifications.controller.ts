import { Controller, Get, Param } from '@nestjs/common';
import { ProblemException } from '../common/problem-details/problem-details.js';
import { isUuid } from '../common/tenant/tenant-id.js';
import { TenantId } from '../common/tenant/tenant-id.decorator.js';
import { TransactionRunner } from '../database/transaction-runner.js';
import { Order } from '../orders/order.entity.js';
import { OrderNotification } from './order-notification.entity.js';
import { toOrderNotificationView, type OrderNotificationView } from './order-notification.view.js';

@Controller('orders')
export class OrderNotificationsController {
  constructor(private readonly db: TransactionRunner) {}

  /** `GET /orders/:id/notifications`: the confirmations sent for the tenant's order, oldest first. */
  @Get(':id/notifications')
  async list(@TenantId() tenantId: string, @Param('id') id: string): Promise<OrderNotificationView[]> {
    const notifications = await this.db.read(async (manager) => {
      const order = isUuid(id) ? await manager.findOneBy(Order, { id: id.toLowerCase(), tenantId }) : null;
      return order
        ? manager.find(OrderNotification, {
            where: { tenantId, orderId: order.id },
            order: { sentAtMs: 'ASC', id: 'ASC' },
          })
        : undefined;
    });
    if (!notifications) {
      throw new ProblemException('notFound', 'There is no order with this id for this tenant.');
    }
    return notifications.map(toOrderNotificationView);
  }
}
