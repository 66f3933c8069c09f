import { randomUUID } from 'node:crypto';
import {
  connectPostgresOrFail,
  dropSchema,
  queryTestDatabase,
  TEST_DATABASE_URL,
  throwawaySchemaName,
} from '../support/servers/postgres.js';
import { startRedisServer } from '../support/servers/redis-server.js';
import { startTcpProxy, type ChunkFault, type TcpProxy } from '../support/net/tcp-proxy.js';
import { startOrdersCluster, type OrdersCluster } from '../support/orders/orders-cluster.js';
import { newTenant, orderBody, type OrderBody } from '../support/orders/orders-fixtures.js';
import {
  PG_DURABLE_CLAIM,
  PG_DURABLE_COMPLETE_AND_COMMIT,
  REDIS_CLAIM,
  REDIS_COMPLETE,
} from '../support/net/store-commands.js';
import { sleep } from '../support/timing.js';

/**
 * The soak test of `POST /orders`: instances of the compiled service on one Redis and one
 * PostgreSQL, both behind TCP proxies; virtual clients create orders (one key and one tenant
 * each) with duplicate bursts, random retries and clients that leave mid-request, while faults
 * are injected at random (connections cut, silenced, delayed, or cut at one command) and
 * instances are SIGKILLed and restarted. When the time is up the faults stop, every key is
 * retried until it has a final answer, and the invariants are checked against the database.
 */
export interface SoakOptions {
  /** How long load and faults last, in s (then a settle phase of at most `settleSeconds`). */
  seconds: number;
  /** @default 2 */
  instances?: number;
  /** Virtual clients, each with one request or burst in flight. @default 24 */
  clients?: number;
  /** Lease of a claim in the service, in ms: a killed instance's keys recover after it. @default 1500 */
  leaseMs?: number;
  /** Mean pause between two injected faults, in ms. @default 1200 */
  faultEveryMs?: number;
  /** Pause between two kills, in s. @default max(6, seconds / 6) */
  killEverySeconds?: number;
  /** @default 30 */
  settleSeconds?: number;
}

/** One invariant, how many cases it looked at, and how many broke it. */
export interface InvariantCheck {
  name: string;
  checked: number;
  violations: number;
  examples: string[];
}

export interface SoakReport {
  seconds: number;
  instances: number;
  clients: number;
  keys: number;
  requests: number;
  retries: number;
  duplicateBursts: number;
  clientsLeft: number;
  answers: Record<string, number>;
  faults: Record<string, number>;
  kills: number;
  ordersInDatabase: number;
  checks: InvariantCheck[];
  violations: number;
}

/** What the clients learnt about one key. */
interface KeyState {
  tenantId: string;
  key: string;
  body: OrderBody;
  /** Order ids named by 201s (fresh or replayed) and by `Location` of replay-unavailable answers. */
  orderIds: Set<string>;
  freshAnswers: number;
  final: boolean;
  unexpected: string[];
}

type Answer = { kind: string; orderId?: string; retryAfterMs?: number; final: boolean; unexpected?: string };

const pick = <T>(items: readonly T[]): T => items[Math.floor(Math.random() * items.length)];
const between = (min: number, max: number) => min + Math.floor(Math.random() * (max - min + 1));

/** The faults aimed at one command, as in the fault e2e suite. */
const AIMED: Record<string, { proxy: 'redis' | 'pg'; fault: ChunkFault }> = {
  'redis claim reply lost': { proxy: 'redis', fault: { match: REDIS_CLAIM, action: 'cut-reply' } },
  'redis completion cut': { proxy: 'redis', fault: { match: REDIS_COMPLETE, action: 'cut' } },
  'pg durable claim cut': { proxy: 'pg', fault: { match: PG_DURABLE_CLAIM, action: 'cut' } },
  'pg cut at COMMIT': { proxy: 'pg', fault: { match: PG_DURABLE_COMPLETE_AND_COMMIT, action: 'cut' } },
  'pg COMMIT reply lost': { proxy: 'pg', fault: { match: PG_DURABLE_COMPLETE_AND_COMMIT, action: 'cut-reply' } },
};

export async function runSoak(
  options: SoakOptions,
  log: (line: string) => void = () => undefined,
): Promise<SoakReport> {
  const instances = options.instances ?? 2;
  const clients = options.clients ?? 24;
  const leaseMs = options.leaseMs ?? 1500;
  const faultEveryMs = options.faultEveryMs ?? 1200;
  const killEveryMs = 1000 * (options.killEverySeconds ?? Math.max(6, options.seconds / 6));
  const settleMs = 1000 * (options.settleSeconds ?? 30);

  await (await connectPostgresOrFail()).end();
  const redis = await startRedisServer();
  const schema = throwawaySchemaName('soak');
  const proxies: TcpProxy[] = [];
  let cluster: OrdersCluster | undefined;
  try {
    const redisProxy = await startTcpProxy(redis.port);
    const pgProxy = await startTcpProxy(Number(new URL(TEST_DATABASE_URL).port || 5432));
    proxies.push(redisProxy, pgProxy);
    const viaProxy = new URL(TEST_DATABASE_URL);
    viaProxy.port = String(pgProxy.port);
    cluster = await startOrdersCluster(instances, {
      DATABASE_URL: viaProxy.toString(),
      DATABASE_SCHEMA: schema,
      REDIS_URL: `redis://127.0.0.1:${redisProxy.port}`,
      IDEMPOTENCY_LEASE_MS: String(leaseMs),
    });
    log(
      `soak: ${instances} instances, ${clients} clients, ${options.seconds} s, lease ${leaseMs} ms, schema ${schema}`,
    );

    const keys: KeyState[] = [];
    const answers: Record<string, number> = {};
    const faults: Record<string, number> = {};
    const stats = { requests: 0, retries: 0, duplicateBursts: 0, clientsLeft: 0, kills: 0 };
    const loadEndsAt = Date.now() + options.seconds * 1000;
    let faultsOn = true;

    const liveUrls = () => cluster!.instances.filter((_, slot) => cluster!.isUp(slot)).map((instance) => instance.url);

    /** One request to a random live instance; `leaveAfterMs` makes the client hang up early. */
    const post = async (state: KeyState, leaveAfterMs?: number): Promise<Answer> => {
      stats.requests++;
      const urls = liveUrls();
      if (urls.length === 0) return { kind: 'no instance up', final: false, retryAfterMs: 200 };
      const signal = leaveAfterMs === undefined ? AbortSignal.timeout(20_000) : AbortSignal.timeout(leaveAfterMs);
      try {
        const response = await fetch(`${pick(urls)}/orders`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'Idempotency-Key': state.key, 'X-Tenant-ID': state.tenantId },
          body: JSON.stringify(state.body),
          signal,
        });
        return await classify(response);
      } catch (error) {
        if (leaveAfterMs !== undefined && signal.aborted) {
          stats.clientsLeft++;
          return { kind: 'client left', final: false };
        }
        return { kind: `network error`, final: false, retryAfterMs: 100 };
      }
    };

    const note = (state: KeyState, answer: Answer) => {
      answers[answer.kind] = (answers[answer.kind] ?? 0) + 1;
      if (answer.orderId) state.orderIds.add(answer.orderId);
      if (answer.kind === '201 fresh') state.freshAnswers++;
      if (answer.unexpected) state.unexpected.push(answer.unexpected);
      if (answer.final) state.final = true;
    };

    const client = async () => {
      while (Date.now() < loadEndsAt) {
        const state: KeyState = {
          tenantId: newTenant(),
          key: randomUUID(),
          body: orderBody(),
          orderIds: new Set(),
          freshAnswers: 0,
          final: false,
          unexpected: [],
        };
        keys.push(state);
        const burst = Math.random() < 0.15 ? between(3, 8) : 1;
        if (burst > 1) stats.duplicateBursts++;
        const leave = Math.random() < 0.03 ? between(0, 60) : undefined;
        const first = await Promise.all(
          Array.from({ length: burst }, (_, i) => post(state, i === 0 ? leave : undefined)),
        );
        first.forEach((answer) => note(state, answer));
        let pause = Math.max(...first.map((a) => a.retryAfterMs ?? 0));
        while (!state.final && Date.now() < loadEndsAt) {
          await sleep(Math.min(pause || 100, 1000));
          stats.retries++;
          const answer = await post(state);
          note(state, answer);
          pause = answer.retryAfterMs ?? 100;
        }
        // A random retry of a settled key: it must replay the same answer.
        if (state.final && Math.random() < 0.1) {
          stats.retries++;
          note(state, await post(state));
        }
      }
    };

    const injectFaults = async () => {
      while (faultsOn) {
        await sleep(between(faultEveryMs / 2, (faultEveryMs * 3) / 2));
        if (!faultsOn) break;
        const kind = pick(['redis cut', 'pg cut', 'redis silent', 'redis delay', 'pg delay', 'aimed', 'aimed']);
        const proxy = kind.startsWith('redis') ? redisProxy : pgProxy;
        let name = kind;
        if (kind.endsWith('cut')) {
          await proxy.cut();
          await sleep(between(100, 700));
          proxy.restore();
        } else if (kind === 'redis silent') {
          proxy.blackhole();
          await sleep(between(200, 1500));
          proxy.restore();
        } else if (kind.endsWith('delay')) {
          proxy.delay(between(5, 40));
          await sleep(between(500, 2000));
          proxy.delay(0);
        } else {
          name = pick(Object.keys(AIMED));
          const aimed = AIMED[name];
          const armed = (aimed.proxy === 'redis' ? redisProxy : pgProxy).arm(aimed.fault);
          await Promise.race([armed.hit, sleep(3000)]);
          armed.disarm();
          if (!armed.fired) continue;
        }
        faults[name] = (faults[name] ?? 0) + 1;
      }
    };

    const killInstances = async () => {
      while (faultsOn) {
        await sleep(between(killEveryMs * 0.7, killEveryMs * 1.3));
        if (!faultsOn) break;
        const slot = between(0, instances - 1);
        await cluster!.kill(slot);
        stats.kills++;
        await sleep(between(200, 1500));
        await cluster!.restart(slot);
      }
    };

    const chaos = Promise.all([injectFaults(), killInstances()]);
    await Promise.all(Array.from({ length: clients }, client));
    faultsOn = false;
    await chaos;
    for (const proxy of proxies) {
      proxy.restore();
      proxy.delay(0);
    }
    for (let slot = 0; slot < instances; slot++) if (!cluster.isUp(slot)) await cluster.restart(slot);
    log(
      `soak: load over (${keys.length} keys, ${stats.requests} requests); settling ${keys.filter((k) => !k.final).length} keys`,
    );

    const settleEndsAt = Date.now() + settleMs;
    await Promise.all(
      keys
        .filter((state) => !state.final)
        .map(async (state) => {
          while (!state.final && Date.now() < settleEndsAt) {
            stats.retries++;
            const answer = await post(state);
            note(state, answer);
            if (!state.final) await sleep(Math.min(answer.retryAfterMs ?? 200, 1000));
          }
        }),
    );

    const checks = await checkInvariants(schema, keys);
    const ordersInDatabase = Number(
      (await queryTestDatabase<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".orders`))[0].n,
    );
    return {
      seconds: options.seconds,
      instances,
      clients,
      keys: keys.length,
      requests: stats.requests,
      retries: stats.retries,
      duplicateBursts: stats.duplicateBursts,
      clientsLeft: stats.clientsLeft,
      answers,
      faults: { ...faults, 'instance killed (SIGKILL)': stats.kills },
      kills: stats.kills,
      ordersInDatabase,
      checks,
      violations: checks.reduce((sum, check) => sum + check.violations, 0),
    };
  } finally {
    await cluster?.stop();
    for (const proxy of proxies) await proxy.close();
    await redis.stop();
    await dropSchema(schema);
  }
}

/** Sorts an answer into a kind; says whether it is final (a true answer to keep) or to retry. */
async function classify(response: Response): Promise<Answer> {
  const text = await response.text();
  const retryAfterMs = 1000 * Number(response.headers.get('retry-after') ?? 0) || undefined;
  const json = (): Record<string, unknown> => {
    try {
      return JSON.parse(text) as Record<string, unknown>;
    } catch {
      return {};
    }
  };
  if (response.status === 201) {
    const replayed = response.headers.get('idempotent-replayed') === 'true';
    return { kind: replayed ? '201 replay' : '201 fresh', orderId: String(json().id), final: true };
  }
  const code = String(json().code ?? '');
  if (response.status === 409 && code === 'idempotency_request_in_progress' && retryAfterMs) {
    return { kind: '409 in progress', final: false, retryAfterMs };
  }
  if (response.status === 409 && code === 'idempotency_replay_unavailable') {
    const location = response.headers.get('location') ?? '';
    return { kind: '409 replay unavailable', orderId: location.replace('/orders/', ''), final: true };
  }
  if (response.status === 503 && code === 'idempotency_store_unavailable' && retryAfterMs) {
    return { kind: '503 store unavailable', final: false, retryAfterMs };
  }
  if (response.status >= 500) return { kind: `${response.status} other`, final: false, retryAfterMs: 200 };
  return {
    kind: `${response.status} unexpected`,
    final: false,
    unexpected: `${response.status} ${text.slice(0, 200)}`,
  };
}

/** The invariants, checked against the database. */
async function checkInvariants(schema: string, keys: KeyState[]): Promise<InvariantCheck[]> {
  const orders = await queryTestDatabase<{ id: string; tenant_id: string; status: string; payment_id: string | null }>(
    `SELECT id, tenant_id, status, payment_id FROM "${schema}".orders`,
  );
  const payments = await queryTestDatabase<{ id: string; tenant_id: string; order_id: string }>(
    `SELECT id, tenant_id, order_id FROM "${schema}".payments`,
  );
  const ordersById = new Map(orders.map((order) => [order.id, order]));
  const paymentsById = new Map(payments.map((payment) => [payment.id, payment]));
  const perTenant = (rows: { tenant_id: string }[]) => {
    const counts = new Map<string, number>();
    for (const row of rows) counts.set(row.tenant_id, (counts.get(row.tenant_id) ?? 0) + 1);
    return counts;
  };
  const ordersPerTenant = perTenant(orders);
  const paymentsPerTenant = perTenant(payments);
  const knownIds = new Set(keys.flatMap((state) => [...state.orderIds]));

  const check = <T>(name: string, cases: readonly T[], broken: (item: T) => string | undefined): InvariantCheck => {
    const failures = cases.map(broken).filter((failure): failure is string => failure !== undefined);
    return { name, checked: cases.length, violations: failures.length, examples: failures.slice(0, 5) };
  };
  return [
    check('at most one order per key', keys, (k) =>
      (ordersPerTenant.get(k.tenantId) ?? 0) > 1 ? `${k.key}: ${ordersPerTenant.get(k.tenantId)} orders` : undefined,
    ),
    check('at most one charge per key', keys, (k) =>
      (paymentsPerTenant.get(k.tenantId) ?? 0) > 1
        ? `${k.key}: ${paymentsPerTenant.get(k.tenantId)} charges`
        : undefined,
    ),
    check('every order answered 201 to a client exists (same tenant)', keys, (k) =>
      [...k.orderIds].some((id) => ordersById.get(id)?.tenant_id !== k.tenantId)
        ? `${k.key}: answered ${[...k.orderIds]}`
        : undefined,
    ),
    check('every answer for a key names the same order', keys, (k) =>
      k.orderIds.size > 1 ? `${k.key}: ${[...k.orderIds]}` : undefined,
    ),
    check('at most one fresh (not replayed) 201 per key', keys, (k) =>
      k.freshAnswers > 1 ? `${k.key}: ${k.freshAnswers} fresh 201s` : undefined,
    ),
    check('no unexpected answer (4xx other than 409)', keys, (k) =>
      k.unexpected.length > 0 ? `${k.key}: ${k.unexpected[0]}` : undefined,
    ),
    check('every key has a true final answer once the faults stop', keys, (k) =>
      k.final ? undefined : `${k.key}: no final answer`,
    ),
    check('every order is paid by exactly its own charge', orders, (o) => {
      const payment = o.payment_id === null ? undefined : paymentsById.get(o.payment_id);
      return o.status === 'paid' && payment?.order_id === o.id && payment.tenant_id === o.tenant_id
        ? undefined
        : `order ${o.id}: ${o.status}`;
    }),
    check('every charge belongs to an order', payments, (p) =>
      ordersById.has(p.order_id) ? undefined : `charge ${p.id}: no order ${p.order_id}`,
    ),
    check('every order in the database was confirmed to its client', orders, (o) =>
      knownIds.has(o.id) ? undefined : `order ${o.id} never confirmed`,
    ),
  ];
}

/** The report as text, for the console. */
export function formatSoakReport(report: SoakReport): string {
  const rows = (record: Record<string, number>) =>
    Object.entries(record)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([name, n]) => `    ${name.padEnd(44)} ${n}`);
  const totalFaults = Object.values(report.faults).reduce((sum, n) => sum + n, 0);
  return [
    `Soak summary (${report.seconds} s of load, ${report.instances} instances, ${report.clients} clients)`,
    `  keys (orders asked for)       ${report.keys}`,
    `  requests                      ${report.requests}`,
    `  retries                       ${report.retries}`,
    `  duplicate bursts              ${report.duplicateBursts}`,
    `  clients that left mid-request ${report.clientsLeft}`,
    `  kills (SIGKILL + restart)     ${report.kills}`,
    `  orders in the database        ${report.ordersInDatabase}`,
    `  answers:`,
    ...rows(report.answers),
    `  faults injected (${totalFaults}):`,
    ...rows(report.faults),
    `  invariant checks:`,
    ...report.checks.map(
      (c) =>
        `    ${c.violations === 0 ? 'ok  ' : 'FAIL'} ${c.name.padEnd(58)} ${c.checked} checked, ${c.violations} violations${c.examples.length ? `: ${c.examples.join('; ')}` : ''}`,
    ),
    `  violations                    ${report.violations}`,
  ].join('\n');
}
