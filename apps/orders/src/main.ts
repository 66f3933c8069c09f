import { HELLO } from '@app/idempotency';
import { REDIS } from '@app/idempotency/redis';
console.log(HELLO, REDIS);
