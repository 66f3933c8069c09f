import { Type } from 'class-transformer';
import { IsBoolean, IsIn, IsInt, IsOptional, IsString, Length, Matches, Max, Min } from 'class-validator';

/** The longest age `olderThanMs` accepts: 31 days. */
export const MAX_AGE_MS = 31 * 24 * 3_600_000;
/** The default age of `GET /admin/idempotency/in-progress`: twice the default lease. */
export const DEFAULT_OLDER_THAN_MS = 60_000;

/**
 * Names one record: `keyId` (from the in-progress list), or `operation` and `key` (the
 * `Idempotency-Key` value as the client sent it) with the tenant from `X-Tenant-ID`.
 */
export class RecordRefDto {
  /** The operation of the route, e.g. `orders.create` for `POST /orders`. */
  @IsOptional()
  @IsString()
  @Length(1, 200)
  operation?: string;

  /** The `Idempotency-Key` field value as the client sent it (quoted or bare). */
  @IsOptional()
  @IsString()
  @Length(1, 1024)
  key?: string;

  /** The storage id: 32 lower-case hex characters. */
  @IsOptional()
  @Matches(/^[0-9a-f]{32}$/, { message: 'keyId must be 32 lower-case hexadecimal characters' })
  keyId?: string;
}

/** `GET /admin/idempotency/records`. */
export class RecordLookupQueryDto extends RecordRefDto {
  /** `true` adds the stored body (base64). */
  @IsOptional()
  @IsIn(['true', 'false'])
  includeBody?: 'true' | 'false';
}

/** `GET /admin/idempotency/in-progress`. */
export class InProgressQueryDto {
  /** Minimum age, in ms. @default 60_000 */
  @IsOptional()
  @Type(() => Number)
  @IsInt()
  @Min(0)
  @Max(MAX_AGE_MS)
  olderThanMs?: number;

  /** Most records per tier. @default 100 */
  @IsOptional()
  @Type(() => Number)
  @IsInt()
  @Min(1)
  @Max(1_000)
  limit?: number;
}

/** `POST /admin/idempotency/records/release`. */
export class ReleaseRecordDto extends RecordRefDto {
  /** Why (a ticket, an incident): the audit log records it. */
  @IsString()
  @Length(1, 500)
  reason!: string;

  /** Also delete a completed record (its response stops answering retries). @default false */
  @IsOptional()
  @IsBoolean()
  includeCompleted?: boolean;
}
