import { Module } from '@nestjs/common';
import { NotificationsModule } from '../notifications/notifications.module.js';
import { OrderEventsQueue } from './order-events.queue.js';
import { OutboxRelay } from './outbox.relay.js';

/** The outbox relay and the `order-events` queue (BullMQ with Redis, in-process without). */
@Module({
  imports: [NotificationsModule],
  providers: [OrderEventsQueue, OutboxRelay],
  exports: [OutboxRelay],
})
export class EventsModule {}
