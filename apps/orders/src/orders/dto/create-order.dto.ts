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
import { CURRENCIES, type Currency } from '../currency.js';
import { MAX_ITEMS, MAX_QUANTITY, MAX_SKU_LENGTH, MAX_UNIT_PRICE_CENTS } from '../order-limits.js';

/** One line of `POST /orders`. */
export class OrderItemDto {
  @IsString()
  @Length(1, MAX_SKU_LENGTH)
  sku!: string;

  @IsInt()
  @Min(1)
  @Max(MAX_QUANTITY)
  quantity!: number;

  @IsInt()
  @Min(0)
  @Max(MAX_UNIT_PRICE_CENTS)
  unitPriceCents!: number;
}

/** Body of `POST /orders`. Unknown fields, here or in an item, are refused. */
export class CreateOrderDto {
  @IsUUID('all')
  customerId!: string;

  @IsIn(CURRENCIES)
  currency!: Currency;

  @IsArray()
  @ArrayMinSize(1)
  @ArrayMaxSize(MAX_ITEMS)
  @ValidateNested({ each: true })
  @Type(() => OrderItemDto)
  items!: OrderItemDto[];
}
