import { formatSoakReport, runSoak } from '../soak/orders-soak.js';

/**
 * The short version of `npm run soak` in the default suite: dozens to hundreds of orders (as the machine allows), faults and at
 * least one kill in about 12 s of load, the same invariants.
 */
it('short soak of POST /orders (faults, kills, duplicate bursts, retries): every invariant holds', async () => {
  const report = await runSoak({ seconds: 12, clients: 8, killEverySeconds: 5, settleSeconds: 20 });
  process.stdout.write(`${formatSoakReport(report)}\n`);
  expect(report.kills).toBeGreaterThanOrEqual(1);
  expect(Object.keys(report.faults).length).toBeGreaterThan(1);
  expect(report.checks.filter((check) => check.violations > 0)).toEqual([]);
  expect(report.keys).toBeGreaterThan(20);
}, 150_000);
