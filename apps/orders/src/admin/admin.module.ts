import { Module } from '@nestjs/common';
import { AdminIdempotencyController } from './admin-idempotency.controller.js';
import { AdminTokenGuard } from './admin-token.guard.js';

/** The operator routes (`/admin/idempotency`). `AppModule` imports it only when `ADMIN_TOKEN` is set. */
@Module({
  controllers: [AdminIdempotencyController],
  providers: [AdminTokenGuard],
})
export class AdminModule {}
