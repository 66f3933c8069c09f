import { formatSoakReport, runSoak } from '../soak/orders-soak.js';

/**
 * The short version of `npm run soak` in the default suite: a few hundred orders, faults and at
 * least one kill in about 15 s of load, the same invariants.
 */
it('short soak of POST /orders (faults, kills, duplicate bursts, retries): every invariant holds', async () => {
  const report = await runSoak({ seconds: 15, clients: 8, killEverySeconds: 6, settleSeconds: 20 });
  process.stdout.write(`${formatSoakReport(report)}\n`);
  expect(report.kills).toBeGreaterThanOrEqual(1);
  expect(Object.keys(report.faults).length).toBeGreaterThan(1);
  expect(report.checks.filter((check) => check.violations > 0)).toEqual([]);
  expect(report.keys).toBeGreaterThan(50);
}, 150_000);
