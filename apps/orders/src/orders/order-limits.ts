/** Limits of `POST /orders`, shared by the DTO, the docs and the tests. */
export const MAX_ITEMS = 100;
export const MAX_QUANTITY = 1000;
export const MAX_UNIT_PRICE_CENTS = 100_000_000;
export const MAX_SKU_LENGTH = 64;
