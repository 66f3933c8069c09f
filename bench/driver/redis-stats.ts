import type { Redis } from 'ioredis';
import { REDIS_STORE_SCRIPTS } from 'nestjs-idempotency/redis';

/** Calls per command since the last `CONFIG RESETSTAT`, from `INFO commandstats`. */
export async function commandCalls(redis: Redis): Promise<Map<string, number>> {
  const info = await redis.info('commandstats');
  const calls = new Map<string, number>();
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(match[1]!, Number(match[2]));
  return calls;
}

/** Commands the store's Lua scripts run inside Redis: commandstats counts them as calls too. */
const COMMANDS_INSIDE_SCRIPTS = new Set(
  Object.values(REDIS_STORE_SCRIPTS).flatMap((lua) =>
    [...lua.matchAll(/redis\.p?call\('([A-Za-z]+)'/g)].map((match) => match[1]!.toLowerCase()),
  ),
);
const SCRIPT_COMMANDS = new Set(['eval', 'evalsha', 'eval_ro', 'evalsha_ro', 'fcall', 'fcall_ro']);
/** The driver's own commands, never counted. */
const DRIVER_COMMANDS = new Set(['info', 'scan', 'memory|usage', 'config|resetstat', 'ping', 'flushall']);

/** What the scenario's requests cost in Redis between two `commandCalls` snapshots. */
export interface RedisCost {
  /** Commands clients sent (round trips): a script call counts once. */
  clientCommands: number;
  /** Every command Redis ran, including those inside scripts. */
  executedCommands: number;
}

/**
 * Commands between two snapshots. When scripts ran, the commands they run inside Redis are
 * subtracted to get what clients sent; a client that sends no scripts (the peer) sent them all.
 */
export function redisCostBetween(before: Map<string, number>, after: Map<string, number>): RedisCost {
  let executed = 0;
  let scripts = 0;
  let inside = 0;
  for (const [command, calls] of after) {
    if (DRIVER_COMMANDS.has(command)) continue;
    const delta = calls - (before.get(command) ?? 0);
    executed += delta;
    if (SCRIPT_COMMANDS.has(command)) scripts += delta;
    else if (COMMANDS_INSIDE_SCRIPTS.has(command)) inside += delta;
  }
  return { clientCommands: scripts > 0 ? executed - inside : executed, executedCommands: executed };
}

/**
 * Median `MEMORY USAGE` (bytes: value, key and their overhead) of up to `sample` keys under
 * `prefix:`; undefined when there is none.
 */
export async function medianBytesPerKey(redis: Redis, prefix: string, sample = 200): Promise<number | undefined> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, found] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1_000);
    keys.push(...found);
    cursor = next;
  } while (cursor !== '0' && keys.length < sample);
  const sizes: number[] = [];
  for (const key of keys.slice(0, sample)) {
    const bytes = (await redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')) as number | null;
    if (bytes !== null) sizes.push(bytes);
  }
  return sizes.length > 0 ? median(sizes) : undefined;
}

/** The median of a non-empty list (the mean of the two middle values for an even count). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}
