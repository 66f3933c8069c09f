import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { openSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { INestApplication } from '@nestjs/common';
import type pg from 'pg';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { createOrdersApp } from '../../apps/orders/src/app.factory.js';
import { startContractApp, type ContractApp } from '../support/apps/contract.app.js';
import { send } from '../support/http/send.js';
import { freePort } from '../support/net/free-port.js';
import { REPO_ROOT } from '../support/orders/app-process.js';
import { newTenant, orderBody } from '../support/orders/orders-fixtures.js';
import {
  connectPostgresOrFail,
  dropSchema,
  TEST_DATABASE_URL,
  throwawaySchemaName,
  waitForLockWaiters,
} from '../support/servers/postgres.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';
import { sleep, waitUntil } from '../support/timing.js';

/**
 * The shipped dashboard and alert rules (observability/), proven against a live Prometheus
 * (Debian's `prometheus`; `.ci/run` installs it) scraping the sample service's GET /metrics:
 * promtool checks and unit-tests the rules, then after a short load with faults every dashboard
 * query, the dashboard's variable and the query part of every alert expression return series,
 * and Prometheus loads every rule with health "ok".
 *
 * The load: orders created, replayed, reused with another payload, duplicated while the first
 * waits on a database lock (409), and refused while the sample's Redis is down (503, store
 * errors). Events the sample's single route cannot produce on demand (a takeover and its lost
 * lease, a released 5xx, a replay-unavailable, a fail-open route) come from the contract
 * fixture running in the same process: the library records through the global OpenTelemetry
 * meter provider, which the sample registered, so the sample's /metrics serves them too.
 */
const OBSERVABILITY = resolve(REPO_ROOT, 'observability');
const RULES = join(OBSERVABILITY, 'prometheus/nestjs-idempotency.rules.yml');
const RULE_TESTS = join(OBSERVABILITY, 'prometheus/nestjs-idempotency.rules.test.yml');
const DASHBOARD = join(OBSERVABILITY, 'grafana/nestjs-idempotency.dashboard.json');

/** Fails loudly when Debian's prometheus package is missing. */
function requireBinary(name: string): void {
  if (spawnSync(name, ['--version']).error) {
    throw new Error(`${name} is not installed: apt-get install prometheus (.ci/run installs it)`);
  }
}

interface Dashboard {
  templating: { list: { name: string; definition?: string }[] };
  panels: { title: string; targets: { expr: string }[] }[];
}

/** A dashboard query as Grafana sends it: its variables replaced ("All" operations, a 1 m rate window). */
const asSent = (expr: string) => expr.replaceAll('$__rate_interval', '1m').replaceAll('$operation', '.*');

/** The query part of an alert expression: the expression without its final threshold comparison. */
function queryPartOf(expr: string): string {
  const match = /^([\s\S]*\S)\s*(?:>|<|>=|<=|==|!=)\s*[\d.]+\s*$/.exec(expr.trim());
  if (!match) throw new Error(`alert expression without a final threshold: ${expr}`);
  return match[1];
}

/**
 * The `expr` of each alert rule of the HTTP group (one `expr:` line per rule). The consumers'
 * group (`nestjs-idempotency-consumers`) is checked by promtool and loaded, but the sample's
 * HTTP load does not produce its series.
 */
async function alertExpressions(group = 'nestjs-idempotency'): Promise<{ alert: string; expr: string }[]> {
  const groups = (await readFile(RULES, 'utf8')).split(/\n {2}- name: /);
  const text = groups.find((g) => g.startsWith(`${group}\n`)) ?? '';
  const alerts = [...text.matchAll(/- alert: (\S+)[\s\S]*?\n\s+expr: (.+)\n/g)];
  return alerts.map(([, alert, expr]) => ({ alert, expr }));
}

describe('dashboard and alert rules on a live Prometheus scraping the sample service', () => {
  let schema: string;
  let redis: ThrowawayRedis;
  let companionRedis: ThrowawayRedis;
  let app: INestApplication;
  let companion: ContractApp;
  let prometheus: ChildProcess | undefined;
  let prometheusUrl: string;
  let dataDir: string;

  const query = async (expr: string) => {
    const res = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(expr)}`);
    const body = (await res.json()) as { status: string; error?: string; data: { result: unknown[] } };
    if (body.status !== 'success') throw new Error(`${expr}: ${body.error}`);
    return body.data.result;
  };

  beforeAll(async () => {
    requireBinary('prometheus');
    requireBinary('promtool');
    await (await connectPostgresOrFail()).end();
    redis = await startRedisServer();
    companionRedis = await startRedisServer();
    schema = throwawaySchemaName('observability_e2e');
    app = await createOrdersApp({
      env: {
        DATABASE_URL: TEST_DATABASE_URL,
        DATABASE_SCHEMA: schema,
        REDIS_URL: redis.url,
        QUEUE_PREFIX: `bull-${schema}`,
      },
      logger: false,
    });
    await app.listen(0, '127.0.0.1');
    companion = await startContractApp('express', new RedisIdempotencyStore(companionRedis.url, { prefix: 'obs' }));

    dataDir = await mkdtemp(join(tmpdir(), 'prometheus-'));
    const target = new URL(await app.getUrl()).host.replace('[::1]', '127.0.0.1');
    const config = [
      'global: { scrape_interval: 1s, evaluation_interval: 1s }',
      `rule_files: [${JSON.stringify(RULES)}]`,
      'scrape_configs:',
      `  - { job_name: orders, metrics_path: /metrics, static_configs: [{ targets: [${JSON.stringify(target)}] }] }`,
    ].join('\n');
    await writeFile(join(dataDir, 'prometheus.yml'), config);
    const port = await freePort();
    prometheusUrl = `http://127.0.0.1:${port}`;
    prometheus = spawn(
      'prometheus',
      [
        `--config.file=${join(dataDir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(dataDir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
      ],
      { stdio: ['ignore', 'ignore', openSync(join(dataDir, 'prometheus.log'), 'w')] },
    );
    const ready = () =>
      fetch(`${prometheusUrl}/-/ready`).then(
        (r) => r.ok,
        () => false,
      );
    await waitUntil(ready, 30_000, 'Prometheus is ready').catch(async (error: Error) => {
      throw new Error(`${error.message}\n${await readFile(join(dataDir, 'prometheus.log'), 'utf8')}`);
    });
    // Targets reach the scrape loop a few seconds after start: the load begins once one scrape is in.
    await waitUntil(async () => (await query('up == 1')).length > 0, 30_000, 'Prometheus has scraped the sample');
  }, 120_000);

  afterAll(async () => {
    if (prometheus && prometheus.exitCode === null) {
      prometheus.kill('SIGTERM');
      await once(prometheus, 'exit');
    }
    await app?.close();
    await companion?.app.close();
    await redis?.stop();
    await companionRedis?.stop();
    if (schema) await dropSchema(schema);
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('promtool accepts the rules and their unit tests pass (each alert firing and not firing)', () => {
    const check = spawnSync('promtool', ['check', 'rules', RULES], { encoding: 'utf8' });
    expect(check.stdout + check.stderr).toMatch(/SUCCESS: 9 rules found/);
    expect(check.status).toBe(0);
    const unit = spawnSync('promtool', ['test', 'rules', RULE_TESTS], { encoding: 'utf8' });
    expect(unit.stdout + unit.stderr).toMatch(/SUCCESS/);
    expect(unit.status).toBe(0);
  });

  it('after a short load with faults, every dashboard query and every alert expression returns series', async () => {
    const orders = await app.getUrl();
    const tenant = newTenant();
    const post = (key: string, body: object) =>
      fetch(`${orders}/orders`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'X-Tenant-ID': tenant, 'Idempotency-Key': key },
        body: JSON.stringify(body),
      });

    // Fresh orders, their replays, and a key reused with another payload.
    const sent = Array.from({ length: 8 }, () => ({ key: randomUUID(), body: orderBody() }));
    for (const { key, body } of sent) expect((await post(key, body)).status).toBe(201);
    for (const { key, body } of sent.slice(0, 4)) expect((await post(key, body)).status).toBe(201);
    expect((await post(sent[0].key, { ...sent[0].body, currency: 'USD' })).status).toBe(422);

    // A duplicate while the first waits on a lock: 409 in progress (and a held claim for the gauges).
    const locker: pg.Client = await connectPostgresOrFail();
    await locker.query('BEGIN');
    await locker.query(`LOCK TABLE "${schema}".payments IN EXCLUSIVE MODE`);
    const heldKey = randomUUID();
    const heldBody = orderBody();
    const held = post(heldKey, heldBody);
    expect(await waitForLockWaiters(locker, schema, 'payments')).toBe(1);
    expect((await post(heldKey, heldBody)).status).toBe(409);
    await sleep(2_500); // a few scrapes while the claim is held
    await locker.query('ROLLBACK');
    await locker.end();
    expect((await held).status).toBe(201);

    // The sample's Redis goes away: fail-closed 503s and store errors; then it comes back.
    await redis.stop();
    for (let i = 0; i < 3; i++) {
      const refused = await post(randomUUID(), orderBody());
      expect(refused.status).toBe(503);
      // B.11: the body says to retry, and when, as the header does.
      expect(await refused.json()).toMatchObject({
        code: 'idempotency_store_unavailable',
        retryable: true,
        retryAfter: Number(refused.headers.get('retry-after')),
      });
    }
    redis = await startRedisServer({ port: redis.port });
    await waitUntil(
      async () => (await post(randomUUID(), orderBody())).status === 201,
      30_000,
      'orders are taken again',
    );

    // The contract fixture, in the same process: a takeover and its lost lease, a released 5xx,
    // a replay-unavailable.
    const call = (path: string, key: string, body: object = {}) =>
      send(companion.url, path, { key, body, headers: { 'X-Tenant-ID': 't1', 'X-User-ID': 'u1' } });
    const zombieKey = randomUUID();
    const claimed = () => companion.probe.contexts.length;
    const before = claimed();
    const zombie = call('/short-lease', zombieKey, { gate: zombieKey });
    await waitUntil(async () => claimed() > before, 10_000, 'the first request holds its claim');
    companion.heartbeats.freeze();
    await sleep(500);
    expect((await call('/short-lease', zombieKey, { gate: zombieKey })).json()).toMatchObject({ tookOver: true });
    companion.heartbeats.thaw();
    companion.probe.open(zombieKey);
    await zombie;
    expect((await call('/status/500', randomUUID())).status).toBe(500);
    const bigKey = randomUUID();
    await call('/big', bigKey);
    expect((await call('/big', bigKey)).status).toBe(409);
    // Its Redis goes away while a handler runs: the completion fails; a fail-open route runs unprotected.
    const strandedKey = randomUUID();
    const beforeStranded = claimed();
    const stranded = call('/short-lease', strandedKey, { gate: strandedKey });
    await waitUntil(async () => claimed() > beforeStranded, 10_000, 'the handler holds its claim');
    await companionRedis.stop();
    companion.probe.open(strandedKey);
    expect((await stranded).status).toBe(201); // the handler succeeded: a failed completion never turns it into an error
    expect((await call('/fail-open', randomUUID())).status).toBe(201);
    companionRedis = await startRedisServer({ port: companionRedis.port });

    // Let Prometheus scrape all of it twice over, so that every rate has two samples.
    await waitUntil(
      async () => (await query('idempotency_fail_open_total')).length > 0,
      30_000,
      'the last counter is scraped',
    );
    await sleep(3_000);

    const dashboard = JSON.parse(await readFile(DASHBOARD, 'utf8')) as Dashboard;
    const empty: string[] = [];
    for (const panel of dashboard.panels) {
      for (const target of panel.targets) {
        if ((await query(asSent(target.expr))).length === 0) empty.push(`panel "${panel.title}": ${target.expr}`);
      }
    }
    const alerts = await alertExpressions();
    expect(alerts).toHaveLength(8);
    for (const { alert, expr } of alerts) {
      if ((await query(queryPartOf(expr))).length === 0) empty.push(`alert ${alert}: ${queryPartOf(expr)}`);
    }
    expect(empty).toEqual([]);

    // The claim gauges saw the order held on the lock (2.5 s of scrapes at 1 s).
    const highest = async (expr: string) =>
      Math.max(...((await query(expr)) as { value: [number, string] }[]).map((r) => Number(r.value[1])));
    expect(await highest('max_over_time(idempotency_claims_active[5m])')).toBeGreaterThanOrEqual(1);
    expect(await highest('max_over_time(idempotency_claims_oldest_age[5m])')).toBeGreaterThanOrEqual(1);

    // The dashboard's operation variable lists both the sample's and the fixture's operations.
    const variable = dashboard.templating.list.find((v) => v.name === 'operation')!;
    expect(variable.definition).toBe('label_values(idempotency_claims_total, operation)');
    const values = await fetch(
      `${prometheusUrl}/api/v1/label/operation/values?match[]=${encodeURIComponent('idempotency_claims_total')}`,
    ).then((r) => r.json() as Promise<{ data: string[] }>);
    expect(values.data).toEqual(expect.arrayContaining(['orders.create', 'POST /short-lease']));

    // Prometheus evaluates every rule without error.
    const rules = await fetch(`${prometheusUrl}/api/v1/rules`).then(
      (r) => r.json() as Promise<{ data: { groups: { rules: { name: string; health: string }[] }[] } }>,
    );
    const loaded = rules.data.groups.flatMap((g) => g.rules);
    const consumerAlerts = await alertExpressions('nestjs-idempotency-consumers');
    expect(consumerAlerts.map((a) => a.alert)).toEqual(['IdempotencyConsumerSettlementFallbacks']);
    expect(loaded.map((r) => r.name).sort()).toEqual([...alerts, ...consumerAlerts].map((a) => a.alert).sort());
    expect(loaded.filter((r) => r.health !== 'ok')).toEqual([]);
  }, 120_000);
});
