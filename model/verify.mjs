#!/usr/bin/env node
/**
 * `npm run verify`: checks every protocol model with Spin (docs/protocol-model.md).
 *
 * Each check generates a verifier (`spin -a`), compiles it (`cc`) and runs it (`pan`), in a
 * temporary directory. A check either must hold (no assertion violated, no acceptance cycle,
 * search complete), or must be violated, naming the property, with a counter-example trail,
 * which is replayed (`spin -t`) and printed. The must-be-violated checks are:
 *   - the documented limit of the fast-tier-only route (Redis forgets a record, and a retry runs again);
 *   - mutants: copies of a model with one guard removed (`KEEP(x) /* guard:NAME *\/` becomes
 *     `KEEP(true)`), or with one behaviour of an older or a wrong engine switched on (-D), so the
 *     checker is known to be looking;
 *   - open findings in today's code, until the fix lands (then the check is flipped to "holds").
 * Exits non-zero when any check does not end as expected.
 *
 * Usage: node model/verify.mjs [--only <substring>] [--jobs <n>] [--keep]
 */
import { spawn } from 'node:child_process';
import { cpus, tmpdir } from 'node:os';
import { copyFile, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const MODEL_DIR = dirname(fileURLToPath(import.meta.url));
const SAFETY_EVENTS = 4;
const LIVENESS_EVENTS = 3;
const MUTANT_EVENTS = 2;
const THREE_CLIENT_EVENTS = 1;
const CHECK_TIMEOUT_MS = 300_000;
/** Weak-fairness bookkeeping for 7 processes (3 requests, Clock, Chaos, Monitor, init): Spin needs 3 beyond 6. */
const PROCESSES_FOR_FAIRNESS = 3;

/** The models, as files of this folder. */
const TODAY = 'durable-today.pml';
const APPROVED = 'durable-approved.pml';
const FAST = 'fast-only.pml';
const PARTITIONED = 'durable-partitioned.pml';

/** Without the three faults that the fast tier alone cannot survive (see fast-only.pml). */
const FAST_KEEPS_ITS_RECORDS = ['CHECK_AT_MOST_ONCE', 'NO_REDIS', 'NO_CRASH', 'NO_FREEZE'];

const safety = (model, extra = []) => ({ model, kind: 'safety', defines: [`MAX_EVENTS=${SAFETY_EVENTS}`, ...extra] });
/** A mutant or an expected limit needs fewer events to show, and its shortest trail reads best. */
const shortest = (model, extra = []) => ({ model, kind: 'safety', defines: [`MAX_EVENTS=${MUTANT_EVENTS}`, ...extra] });
/** Three concurrent requests (and the later one) need more owner tokens, and fewer events to stay small. */
const threeClients = (model, extra = []) => ({
  model,
  kind: 'safety',
  defines: ['CLIENTS=3', 'NTOK=7', `MAX_EVENTS=${THREE_CLIENT_EVENTS}`, ...extra],
});
/**
 * The two LTL properties of a model, on one compiled verifier, and a vacuity check: `stuck_reachable`
 * ([] !STUCK) must be violated, or `no_stuck_key` would hold only because no key ever gets stuck.
 */
const liveness = (model, extra = []) => ({
  model,
  kind: 'liveness',
  defines: [`MAX_EVENTS=${LIVENESS_EVENTS}`, ...extra],
  ltls: [
    { ltl: 'every_request_answered', expect: 'holds' },
    { ltl: 'no_stuck_key', expect: 'holds' },
    { ltl: 'stuck_reachable', expect: { violates: ['never claim'] } },
  ],
});

/**
 * Every check. `expect: 'holds'`, or `{ violates: [property, ...] }` (any of them; the first
 * assertion that fails names it). `mutate`: the guard removed; `why`: printed with the result.
 */
const CHECKS = [
  // Model 1: today's durable, transactional route.
  {
    name: 'today: safety (at most one effect, no false success, outcome from the handler, commit ⇔ completed, fencing)',
    ...safety(TODAY, ['ONE_ANSWER_UNCHECKED']),
    expect: 'holds',
    optimize: true,
  },
  {
    name: 'today: one answer per key (a stored failure completes in its transaction; it was a finding of this model)',
    model: TODAY,
    kind: 'safety',
    defines: ['MAX_EVENTS=2'],
    expect: 'holds',
  },
  { name: 'today: liveness', ...liveness(TODAY, ['ONE_ANSWER_UNCHECKED']), expect: 'holds', optimize: true },
  {
    name: 'today: safety with three concurrent requests and a later one',
    ...threeClients(TODAY, ['ONE_ANSWER_UNCHECKED']),
    expect: 'holds',
  },
  // Model 2: the approved change (the claim as the business transaction's first INSERT).
  {
    name: 'approved: safety (all properties, one answer per key included)',
    ...safety(APPROVED),
    expect: 'holds',
    optimize: true,
  },
  { name: 'approved: liveness', ...liveness(APPROVED), expect: 'holds', optimize: true },
  {
    name: 'approved: safety with three concurrent requests and a later one',
    ...threeClients(APPROVED),
    expect: 'holds',
    optimize: true,
  },
  // Model 3: the fast tier alone.
  { name: 'fast-only: safety (fencing, no false success, outcome from the handler)', ...safety(FAST), expect: 'holds' },
  { name: 'fast-only: liveness', ...liveness(FAST), expect: 'holds' },
  {
    name: 'fast-only: at most one effect and one answer, while Redis keeps its records and no owner dies or freezes',
    ...safety(FAST, FAST_KEEPS_ITS_RECORDS),
    expect: 'holds',
  },
  {
    name: 'fast-only LIMIT: Redis loses the record, a retry runs the handler again',
    ...shortest(FAST, ['CHECK_AT_MOST_ONCE', 'NO_CRASH', 'NO_FREEZE']),
    expect: { violates: ['at_most_one_effect'] },
  },
  {
    name: 'fast-only LIMIT: a worker dies between its write and complete, the takeover runs again',
    ...shortest(FAST, ['CHECK_AT_MOST_ONCE', 'NO_REDIS', 'NO_FREEZE']),
    expect: { violates: ['at_most_one_effect'] },
  },
  {
    name: 'fast-only LIMIT: a frozen owner is taken over while its handler still runs',
    ...shortest(FAST, ['CHECK_AT_MOST_ONCE', 'NO_REDIS', 'NO_CRASH']),
    expect: { violates: ['at_most_one_effect'] },
  },
  // Model 4: the claim on the partitioned table (per-key advisory lock, every attached partition read).
  { name: 'partitioned: mutual exclusion across partition edges, drops and expiry', ...safety(PARTITIONED), expect: 'holds' },
  // Mutants: each must be caught.
  {
    name: 'mutant fast-only: complete without the owner-token check',
    ...shortest(FAST),
    mutate: 'fast-complete-owner',
    expect: { violates: ['fencing'] },
  },
  {
    name: 'mutant fast-only: release without the owner-token check',
    ...shortest(FAST),
    mutate: 'fast-release-owner',
    expect: { violates: ['fencing'] },
  },
  {
    name: 'mutant fast-only: extend (heartbeat) without the owner-token check',
    ...shortest(FAST),
    mutate: 'fast-extend-owner',
    expect: { violates: ['fencing'] },
  },
  {
    name: 'mutant fast-only: takeOver (and judge) without the lease check',
    ...shortest(FAST, FAST_KEEPS_ITS_RECORDS),
    mutate: 'takeover-lease',
    expect: { violates: ['at_most_one_effect'] },
  },
  {
    name: "mutant fast-only: the engine before rule 17a, an outer layer's early answer releases the claim",
    ...shortest(FAST, [...FAST_KEEPS_ITS_RECORDS, 'PRE_17A_OUTER']),
    expect: { violates: ['at_most_one_effect'] },
  },
  {
    name: 'mutant fast-only: the engine before issue 22, the handler runs for a response answered while the claim was pending',
    ...shortest(FAST, [...FAST_KEEPS_ITS_RECORDS, 'PRE_EVENTS_PENDING_ANSWER']),
    expect: { violates: ['at_most_one_effect'] },
    why: "the 408 given while begin() was pending releases the key the handler's write committed under: the retry charges again",
  },
  {
    name: "mutant fast-only: the engine before rule 17a, a departed client's failure is stored as a 200",
    ...shortest(FAST, [...FAST_KEEPS_ITS_RECORDS, 'PRE_17A_DISCONNECT']),
    expect: { violates: ['outcome_from_handler', 'no_false_success'] },
  },
  {
    name: 'mutant today: the durable claim overwrites an existing row (no ON CONFLICT DO NOTHING)',
    ...shortest(TODAY, ['ONE_ANSWER_UNCHECKED']),
    mutate: 'durable-claim-if-absent',
    expect: { violates: ['at_most_one_effect', 'commit_iff_completed', 'fencing'] },
  },
  // No mutant for the durable complete's owner-token check: on transactional routes every
  // completion now happens inside the transaction, whose `SELECT … FOR UPDATE` checks the owner
  // first, so removing the second check changes nothing the model can reach (docs/protocol-model.md).
  {
    name: 'mutant today: the durable release without the owner-token check',
    ...shortest(TODAY, ['ONE_ANSWER_UNCHECKED']),
    mutate: 'durable-release-owner',
    expect: { violates: ['fencing'] },
  },
  {
    name: 'mutant today: the durable extend (heartbeat) without the owner-token check',
    ...shortest(TODAY, ['ONE_ANSWER_UNCHECKED']),
    mutate: 'durable-extend-owner',
    expect: { violates: ['fencing'] },
  },
  {
    name: "mutant today: a failed handler's writes commit (no ROLLBACK on failure)",
    ...shortest(TODAY, ['ONE_ANSWER_UNCHECKED']),
    mutate: 'rollback-on-failure',
    expect: { violates: ['commit_iff_completed'] },
  },
  {
    name: 'mutant today: success told although the COMMIT did not answer',
    ...shortest(TODAY, ['ONE_ANSWER_UNCHECKED']),
    mutate: 'commit-answered',
    expect: { violates: ['no_false_success', 'outcome_from_handler'] },
  },
  {
    name: "mutant today: the engine before rule 17a, an outer layer's answer commits, then releases",
    ...shortest(TODAY, ['ONE_ANSWER_UNCHECKED', 'PRE_17A_OUTER']),
    expect: { violates: ['commit_iff_completed'] },
  },
  {
    name: "mutant today: the engine before rule 17a, a departed client's failure is stored as a 200",
    ...shortest(TODAY, ['ONE_ANSWER_UNCHECKED', 'PRE_17A_DISCONNECT']),
    expect: { violates: ['outcome_from_handler', 'no_false_success'] },
  },
  {
    name: 'mutant approved: the claim INSERT does not wait for an uncommitted INSERT (no unique index)',
    ...shortest(APPROVED),
    mutate: 'insert-waits',
    expect: { violates: ['at_most_one_effect'] },
  },
  {
    name: "mutant approved: a failed handler's writes commit (no ROLLBACK on failure)",
    ...shortest(APPROVED),
    mutate: 'rollback-on-failure',
    expect: { violates: ['commit_iff_completed'] },
  },
  {
    name: 'mutant approved: success told although the COMMIT did not answer',
    ...shortest(APPROVED),
    mutate: 'commit-answered',
    expect: { violates: ['no_false_success', 'outcome_from_handler'] },
  },
  {
    name: 'mutant approved: a stored failure written after a full ROLLBACK instead of in the transaction',
    ...shortest(APPROVED, ['STORE_FAILURE_AFTER_ROLLBACK']),
    expect: { violates: ['one_answer'] },
  },
  {
    name: 'mutant partitioned: the claim takes no per-key advisory lock',
    ...shortest(PARTITIONED),
    mutate: 'partitioned-key-lock',
    expect: { violates: ['mutual_exclusion'] },
  },
  {
    name: 'mutant partitioned: the claim reads the current partition only',
    ...shortest(PARTITIONED, ['CHECK_CURRENT_ONLY']),
    expect: { violates: ['mutual_exclusion'] },
    why: 'a record claimed before the partition edge is live in the previous partition: a second claim is granted',
  },
  {
    name: 'mutant partitioned: the reaper drops a past partition by age, a live (extended) row with it',
    ...shortest(PARTITIONED),
    mutate: 'partition-drop-live-check',
    expect: { violates: ['mutual_exclusion'] },
  },
  {
    name: 'mutant partitioned: the reaper does not wait for an uncommitted insert into the partition',
    ...shortest(PARTITIONED),
    mutate: 'partition-drop-waits-writers',
    expect: { violates: ['mutual_exclusion'] },
  },
  {
    name: 'mutant partitioned: the claim reads the clock before the lock waits of its DELETE',
    ...shortest(PARTITIONED, ['CLOCK_BEFORE_LOCKS']),
    expect: { violates: ['mutual_exclusion'] },
    why: 'the row goes in a partition the reaper found empty before the claim held it: the drop takes a live record',
  },
];

function parseArgs(argv) {
  const args = { only: undefined, jobs: Math.min(2, Math.max(1, cpus().length)), keep: false };
  for (let i = 0; i < argv.length; i += 1) {
    if (argv[i] === '--only') args.only = argv[++i];
    else if (argv[i] === '--jobs') args.jobs = Number(argv[++i]);
    else if (argv[i] === '--keep') args.keep = true;
    else throw new Error(`unknown argument ${argv[i]} (use --only <substring>, --jobs <n>, --keep)`);
  }
  if (!Number.isInteger(args.jobs) || args.jobs < 1) throw new Error('--jobs needs a positive integer');
  return args;
}

/** Runs a command; resolves with its exit code and output (never rejects on a non-zero exit). */
function run(command, args, cwd, timeoutMs = CHECK_TIMEOUT_MS) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`${command} could not be started (${error.message}): is it installed? (.ci/run installs spin)`));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code: signal ? `killed by ${signal} after ${timeoutMs / 1000}s` : code, output });
    });
  });
}

/** The guard-removed copy of the model files: every `KEEP(x) /* guard:NAME *\/` becomes `KEEP(true)`. */
const GUARD = /KEEP\(((?:[^()]|\([^()]*\))*)\)(\s*\/\*\s*guard:([\w-]+)\s*\*\/)/g;

async function prepareSources(dir, mutate) {
  const files = (await readdir(MODEL_DIR)).filter((file) => file.endsWith('.pml'));
  let removed = 0;
  for (const file of files) {
    const text = await readFile(join(MODEL_DIR, file), 'utf8');
    if (!mutate) {
      await copyFile(join(MODEL_DIR, file), join(dir, file));
      continue;
    }
    const mutated = text.replace(GUARD, (whole, _condition, comment, name) => {
      if (name !== mutate) return whole;
      removed += 1;
      return `KEEP(true)${comment.replace(`guard:${name}`, `guard:${name} REMOVED`)}`;
    });
    await writeFile(join(dir, file), mutated);
  }
  if (mutate && removed === 0) throw new Error(`no guard named ${mutate} in model/*.pml`);
  return removed;
}

function statistics(output) {
  const number = (pattern) => {
    const match = output.match(pattern);
    return match ? Number(match[1]) : undefined;
  };
  return {
    stored: number(/([\d.e+]+) states, stored/),
    transitions: number(/([\d.e+]+) transitions \(= /),
    depth: number(/depth reached (\d+)/),
    errors: number(/errors: (\d+)/),
  };
}

/**
 * The lines of a replayed trail worth reading: the model's narration (Spin indents each process's
 * printf by its process number; a line printed in two parts gets that indentation in the middle
 * too) and how the trail ends.
 */
function narration(replay) {
  const story = [];
  const end = [];
  for (const line of replay.split('\n')) {
    if (/^ {4,}\S/.test(line) && !/^\s*\d+:\s+proc/.test(line)) story.push(line.replace(/(\S) {6,}/g, '$1 '));
    else if (/assertion violated|text of failed assertion|acceptance cycle|trail ends/.test(line))
      end.push(line.trim());
  }
  const base = Math.min(...story.map((line) => line.length - line.trimStart().length));
  return [...story.map((line) => `  ${line.slice(base)}`), ...end.map((line) => `  ${line}`)];
}

/**
 * Builds the verifier of a check and runs it: once for a safety check, once per LTL property for
 * a liveness check (both on the same compiled verifier). Resolves with one result per run.
 */
async function runCheck(check, keep) {
  const dir = await mkdtemp(join(tmpdir(), 'idempotency-model-'));
  const started = Date.now();
  const runs =
    check.kind === 'liveness'
      ? check.ltls.map((one) => ({ ...check, ...one, name: `${check.name}: ${one.ltl}` }))
      : [check];
  const failAll = (detail) =>
    runs.map((run) => ({ check: run, ok: false, detail, seconds: (Date.now() - started) / 1000 }));
  try {
    await prepareSources(dir, check.mutate);
    const defines = check.defines.map((d) => `-D${d}`);
    const generated = await run('spin', ['-a', ...defines, check.model], dir);
    if (generated.code !== 0) return failAll(`spin -a failed:\n${generated.output}`);
    const wantViolation = check.expect !== 'holds';
    const ccFlags =
      check.kind === 'safety'
        ? ['-DSAFETY', '-DNOCLAIM', ...(wantViolation ? ['-DBFS'] : [])]
        : [`-DNFAIR=${PROCESSES_FOR_FAIRNESS}`];
    // -O0 compiles in a fifth of the time of -O2; only the largest searches repay optimisation.
    const compiled = await run(
      'cc',
      [check.optimize ? '-O1' : '-O0', '-w', '-DMEMLIM=3072', ...ccFlags, '-o', 'pan', 'pan.c'],
      dir,
    );
    if (compiled.code !== 0) return failAll(`cc failed:\n${compiled.output}`);
    const buildSeconds = (Date.now() - started) / 1000;
    const results = [];
    for (const one of runs)
      results.push({ ...(await search(one, dir, defines, one.expect !== 'holds')), buildSeconds });
    return results;
  } finally {
    if (!keep) await rm(dir, { recursive: true, force: true });
    else console.log(`  (kept ${dir})`);
  }
}

async function search(check, dir, defines, wantViolation) {
  const started = Date.now();
  const panArgs = check.kind === 'safety' ? ['-m200000', '-w22'] : ['-a', '-f', '-m200000', '-w22', '-N', check.ltl];
  for (const file of await readdir(dir)) if (file.endsWith('.trail')) await rm(join(dir, file));
  const searched = await run('./pan', panArgs, dir);
  const output = searched.output;
  const stats = statistics(output);
  const seconds = (Date.now() - started) / 1000;
  const incomplete =
    /max search depth too small|out of memory|MEMLIM/i.test(output) || typeof searched.code === 'string';
  if (incomplete || stats.errors === undefined) {
    return { check, ok: false, stats, seconds, detail: `the search did not complete:\n${output.slice(-1500)}` };
  }
  // A model assertion names its property; a never claim's own assertion (a safety LTL) does not.
  const assertion = output.match(/assertion violated\s+(\S+)/)?.[1];
  const violated = assertion
    ? /^\w+$/.test(assertion)
      ? assertion
      : 'never claim'
    : /acceptance cycle/.test(output)
      ? 'acceptance cycle'
      : undefined;
  if (!wantViolation) {
    const ok = stats.errors === 0;
    const detail = ok ? undefined : (await replayTrail(check, dir, defines, output)).join('\n');
    return { check, ok, stats, seconds, violated, detail };
  }
  const trail = await replayTrail(check, dir, defines, output);
  const ok = stats.errors > 0 && check.expect.violates.includes(violated) && trail.length > 0;
  return { check, ok, stats, seconds, violated, detail: trail.join('\n') };
}

async function replayTrail(check, dir, defines, output) {
  const trailFile = (await readdir(dir)).find((file) => file.endsWith('.trail'));
  if (!trailFile) return [`no trail was written:\n${output.slice(-800)}`];
  const replayArgs = ['-t', '-k', trailFile, ...defines];
  if (check.kind === 'liveness') replayArgs.push('-N', check.ltl);
  const replay = await run('spin', [...replayArgs, check.model], dir);
  return narration(replay.output);
}

async function pool(items, jobs, work) {
  const results = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(jobs, items.length) }, async () => {
      while (next < items.length) {
        const index = next++;
        results[index] = await work(items[index]);
      }
    }),
  );
  return results;
}

function describe(result) {
  const { check, ok, stats, seconds, buildSeconds, violated } = result;
  const counts =
    stats?.stored !== undefined
      ? `${stats.stored.toLocaleString('en')} states, ${stats.transitions?.toLocaleString('en') ?? '?'} transitions`
      : 'no statistics';
  const expected =
    check.expect === 'holds'
      ? ok
        ? 'holds'
        : `expected to hold, violated: ${violated ?? 'the search did not complete'}`
      : `violated: ${violated ?? 'nothing'}`;
  const mark = ok ? (check.finding ? 'FINDING' : 'ok') : 'FAIL';
  const time = `search ${seconds?.toFixed(1) ?? '?'} s${buildSeconds === undefined ? '' : ` (build ${buildSeconds.toFixed(1)} s)`}`;
  return `${mark.padEnd(7)} ${check.name}\n        ${expected}; ${counts}; ${time}`;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const selected = CHECKS.filter((check) => !args.only || check.name.includes(args.only));
  if (selected.length === 0) throw new Error(`no check matches ${args.only}`);
  const version = await run('spin', ['-V'], MODEL_DIR, 10_000);
  console.log(`${version.output.trim()}; ${selected.length} checks, ${args.jobs} at a time`);
  const started = Date.now();
  const perCheck = await pool(selected, args.jobs, async (check) => {
    const results = await runCheck(check, args.keep);
    for (const result of results) {
      const lines = [describe(result)];
      if (!result.ok || result.check.expect !== 'holds') {
        const detail = (result.detail ?? '').split('\n');
        const shown =
          detail.length > 60
            ? [...detail.slice(0, 25), `… ${detail.length - 50} lines …`, ...detail.slice(-25)]
            : detail;
        if (result.detail) lines.push(...shown.map((line) => `      ${line}`));
        if (check.why) lines.push(`      (${check.why})`);
      }
      console.log(lines.join('\n'));
    }
    return results;
  });
  const results = perCheck.flat();
  const failed = results.filter((result) => !result.ok);
  const findings = results.filter((result) => result.ok && result.check.finding);
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`\n${results.length - failed.length}/${results.length} checks as expected in ${seconds} s.`);
  for (const finding of findings) console.log(`OPEN FINDING (today's code): ${finding.check.name}`);
  if (failed.length > 0) {
    console.log(`FAILED: ${failed.map((result) => result.check.name).join('; ')}`);
    process.exitCode = 1;
  }
}

main().catch((error) => {
  console.error(error instanceof Error ? error.message : error);
  process.exitCode = 1;
});
