import { Module } from '@nestjs/common';
import { OrderCreatedProcessor } from './order-created.processor.js';
import { OrderCreatedRmqConsumer } from './order-created.rmq-consumer.js';
import { OrderNotificationsController } from './order-notifications.controller.js';

/**
 * Order confirmations: the `order.created` processor (BullMQ, in-process), its RabbitMQ consumer
 * (active when the app connects the RMQ transport) and `GET /orders/:id/notifications`.
 */
@Module({
  controllers: [OrderNotificationsController, OrderCreatedRmqConsumer],
  providers: [OrderCreatedProcessor],
  exports: [OrderCreatedProcessor],
})
export class NotificationsModule {}
