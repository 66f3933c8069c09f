import { Body, Controller, Get, Headers, HttpCode, Post, Query, UseGuards } from '@nestjs/common';
import { ApiBearerAuth, ApiHeader, ApiTags, ApiUnauthorizedResponse } from '@nestjs/swagger';
import {
  IdempotencyAdmin,
  type IdempotencyForceReleaseResult,
  type IdempotencyInProgressListing,
  type IdempotencyLookupResult,
} from 'nestjs-idempotency/admin';
import { ProblemException } from '../common/problem-details/problem-details.js';
import { SkipTenant } from '../common/tenant/skip-tenant.decorator.js';
import { TENANT_HEADER } from '../common/tenant/tenant-id.js';
import { AdminActor } from './admin-actor.decorator.js';
import { AdminTokenGuard } from './admin-token.guard.js';
import {
  DEFAULT_OLDER_THAN_MS,
  InProgressQueryDto,
  RecordLookupQueryDto,
  ReleaseRecordDto,
} from './dto/admin-idempotency.dto.js';
import { recordRefOf } from './record-ref.js';

/**
 * `/admin/idempotency`: inspection and repair of idempotency records over HTTP, on the
 * library's `IdempotencyAdmin`. Exists only when `ADMIN_TOKEN` is set; every route needs
 * `Authorization: Bearer <ADMIN_TOKEN>` (checked before the tenant and the input).
 */
@Controller('admin/idempotency')
@SkipTenant()
@UseGuards(AdminTokenGuard)
@ApiTags('admin')
@ApiBearerAuth('admin-token')
@ApiUnauthorizedResponse({ description: 'No `Authorization: Bearer <ADMIN_TOKEN>`: `admin-unauthorized` problem.' })
export class AdminIdempotencyController {
  constructor(private readonly admin: IdempotencyAdmin) {}

  /** `GET /admin/idempotency/records?operation=&key=` (+ `X-Tenant-ID`) or `?keyId=`: both tiers' view. */
  @Get('records')
  lookup(
    @Query() query: RecordLookupQueryDto,
    @Headers(TENANT_HEADER) tenant: string | undefined,
  ): Promise<IdempotencyLookupResult> {
    return this.admin.lookup(recordRefOf(query, tenant, this.admin), { includeBody: query.includeBody === 'true' });
  }

  /** `GET /admin/idempotency/in-progress?olderThanMs=&limit=`: records running longer than that, oldest first. */
  @Get('in-progress')
  listInProgress(@Query() query: InProgressQueryDto): Promise<IdempotencyInProgressListing> {
    return this.admin.listInProgress({ olderThanMs: query.olderThanMs ?? DEFAULT_OLDER_THAN_MS, limit: query.limit });
  }

  /**
   * `POST /admin/idempotency/records/release` `{ operation, key, reason }` or `{ keyId, reason }`,
   * with `X-Admin-Actor`: deletes the record in both tiers (audited). 200 with the outcome per
   * tier, or a 503 problem carrying it when a tier could not be reached.
   */
  @Post('records/release')
  @HttpCode(200)
  @ApiHeader({ name: 'X-Admin-Actor', required: true, description: 'Who releases, for the audit log.' })
  async release(
    @Body() body: ReleaseRecordDto,
    @Headers(TENANT_HEADER) tenant: string | undefined,
    @AdminActor() actor: string,
  ): Promise<IdempotencyForceReleaseResult> {
    const result = await this.admin.forceRelease(recordRefOf(body, tenant, this.admin), {
      actor,
      reason: body.reason,
      includeCompleted: body.includeCompleted,
    });
    if (typeof result.fast !== 'string' || typeof result.durable !== 'string') {
      throw new ProblemException('storeUnavailable', 'A tier could not be reached; retry the release.', { result });
    }
    return result;
  }
}
