import { Module } from '@nestjs/common';
import { NotificationsModule } from '../notifications/notifications.module.js';
import { OrderEventsQueue } from './order-events.queue.js';
import { OrderEventsRabbitPublisher } from './order-events.rabbitmq.js';
import { OutboxRelay } from './outbox.relay.js';

/** The outbox relay and where it hands events: RabbitMQ, the `order-events` BullMQ queue with Redis, or in-process. */
@Module({
  imports: [NotificationsModule],
  providers: [OrderEventsQueue, OrderEventsRabbitPublisher, OutboxRelay],
  exports: [OutboxRelay],
})
export class EventsModule {}
