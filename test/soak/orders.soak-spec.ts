import { formatSoakReport, runSoak } from './orders-soak.js';

/**
 * `npm run soak` (`SOAK_SECONDS`, default 120): thousands of orders under random faults and
 * kills; prints the summary and fails on any violated invariant.
 */
const seconds = Number(process.env.SOAK_SECONDS || 120);

it(`soak of POST /orders for ${seconds} s: every invariant holds`, async () => {
  const report = await runSoak({ seconds }, (line) => process.stdout.write(`${line}\n`));
  process.stdout.write(`${formatSoakReport(report)}\n`);
  expect(report.checks.filter((check) => check.violations > 0)).toEqual([]);
  expect(report.violations).toBe(0);
});
