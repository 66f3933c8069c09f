import { Module } from '@nestjs/common';
import { OrderCreatedProcessor } from './order-created.processor.js';
import { OrderNotificationsController } from './order-notifications.controller.js';

/** Order confirmations: the `order.created` processor and `GET /orders/:id/notifications`. */
@Module({
  controllers: [OrderNotificationsController],
  providers: [OrderCreatedProcessor],
  exports: [OrderCreatedProcessor],
})
export class NotificationsModule {}
