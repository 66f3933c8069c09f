/**
 * DI token of the app's one ioredis client, present only when `REDIS_URL` is set (inject it
 * with `@Optional()`). The app owns it and closes it on shutdown; the idempotency store receives
 * it and must not close it.
 */
export const REDIS_CLIENT = Symbol('REDIS_CLIENT');
