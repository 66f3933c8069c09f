import { Type } from 'class-transformer';
import {
  ArrayMaxSize,
  ArrayMinSize,
  IsArray,
  IsIn,
  IsInt,
  IsString,
  IsUUID,
  Length,
  Max,
  Min,
  ValidateNested,
} from 'class-validator';

/** One line of the benchmark order. */
export class BenchOrderItemDto {
  @IsString()
  @Length(1, 32)
  sku!: string;

  @IsInt()
  @Min(1)
  @Max(1_000)
  quantity!: number;

  @IsInt()
  @Min(0)
  @Max(10_000_000)
  unitPriceCents!: number;
}

/** The body every scenario validates: the same DTO whatever the idempotency layer. */
export class BenchOrderDto {
  @IsUUID('all')
  customerId!: string;

  @IsIn(['EUR', 'USD', 'GBP'])
  currency!: string;

  @IsArray()
  @ArrayMinSize(1)
  @ArrayMaxSize(20)
  @ValidateNested({ each: true })
  @Type(() => BenchOrderItemDto)
  items!: BenchOrderItemDto[];
}
