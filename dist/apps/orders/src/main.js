import { HELLO } from "../../../libs/idempotency/src/index.js";
import { REDIS } from "../../../libs/idempotency/src/redis/index.js";
console.log(HELLO, REDIS);
//# sourceMappingURL=main.js.map