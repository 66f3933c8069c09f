#!/usr/bin/env node
// One-off migration (issue 17), safe to run twice: `node scripts/migrate-imports.mjs` from the
// repository root, after merging a branch written against the old layout. It rewrites tracked
// .ts/.mjs/.cjs/.js/.md files in place:
//   1. `@app/idempotency[/x]` (the old path alias) becomes the package name `nestjs-idempotency[/x]`;
//   2. names that moved from the root entry point to a subpath are imported from it
//      (`IdempotencyAdmin` from `/admin`, `IDEMPOTENCY_METRICS` from `/telemetry`, ...);
//   3. source comments citing "CONTRACT B.x" / "CONTRACT.md" cite docs/contract.md (same numbering).
// It then lists the imports of names that are no longer exported at all (engine internals): a
// test that needs them belongs in libs/idempotency/test (with relative imports of ../src), or
// can use the public API (IdempotencyAdmin.keyIdOf() for a storage id, the stores for a claim).
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';

const MOVED = {
  admin: [
    'IdempotencyAdmin',
    'IdempotencyRecordRef',
    'IdempotencyRecordView',
    'IdempotencyTierView',
    'IdempotencyLookupResult',
    'IdempotencyTierListing',
    'IdempotencyInProgressListing',
    'IdempotencyForceReleaseRequest',
    'IdempotencyTierRelease',
    'IdempotencyForceReleaseResult',
    'ParsedKey',
  ],
  consumers: [
    'IdempotentConsumer',
    'IdempotentConsumerInterceptor',
    'IdempotencyConsumerContext',
    'IdempotentConsumerKeyError',
    'ConsumerIdempotencyOptions',
    'IdempotentConsumerOptions',
    'messageDisposition',
    'ConsumerRunOutcome',
    'DeadLetterReason',
    'MessageDisposition',
    'MessageSettlement',
    'SettlementInput',
    'UnparsableMessage',
    'UnparsableMessageError',
    'IDEMPOTENCY_KEY_MESSAGE_HEADER',
  ],
  redis: [
    'EventDeduplicator',
    'DedupStats',
    'DedupVerdict',
    'EventDeduplicatorOptions',
    'sizeEventDeduplicator',
    'EventDedupSizing',
    'EventDedupSizingInput',
  ],
  telemetry: [
    'IDEMPOTENCY_INSTRUMENTATION_SCOPE',
    'IDEMPOTENCY_METRICS',
    'IDEMPOTENCY_SPANS',
    'IDEMPOTENCY_SPAN_ATTRIBUTES',
  ],
};
const subpathOf = new Map(Object.entries(MOVED).flatMap(([subpath, names]) => names.map((name) => [name, subpath])));
const rootExports = new Set(
  [...readFileSync('libs/idempotency/src/index.ts', 'utf8').matchAll(/export\s+(?:type\s+)?\{([^}]*)\}/g)].flatMap(
    (m) =>
      m[1]
        .split(',')
        .map(
          (n) =>
            n
              .trim()
              .replace(/^type\s+/, '')
              .split(/\s+as\s+/)[0],
        )
        .filter(Boolean),
  ),
);

const files = execFileSync(
  'git',
  ['ls-files', '-z', '--', '*.ts', '*.mts', '*.cts', '*.mjs', '*.cjs', '*.js', '*.md'],
  { encoding: 'utf8' },
)
  .split('\0')
  .filter((file) => file && !file.startsWith('scripts/migrate-imports'));
const leftovers = [];
for (const file of files) {
  const before = readFileSync(file, 'utf8');
  let text = before.replaceAll('@app/idempotency', 'nestjs-idempotency');
  if (!file.endsWith('.md')) {
    text = text.replace(/`?CONTRACT\.md`?/g, 'docs/contract.md').replace(/CONTRACT B\./g, 'docs/contract.md B.');
  }
  text = text.replace(
    /import\s+(type\s+)?\{([^}]*)\}\s+from\s+'nestjs-idempotency';\n/g,
    (statement, typeOnly = '', list) => {
      const groups = new Map([['', []]]);
      for (const entry of list
        .split(',')
        .map((n) => n.trim())
        .filter(Boolean)) {
        const name = entry.replace(/^type\s+/, '').split(/\s+as\s+/)[0];
        const subpath = subpathOf.get(name) ?? '';
        if (!subpath && !rootExports.has(name)) leftovers.push(`${file}: ${name}`);
        groups.set(subpath, [...(groups.get(subpath) ?? []), entry]);
      }
      if (groups.size === 1) return statement;
      return [...groups]
        .filter(([, names]) => names.length > 0)
        .map(
          ([subpath, names]) =>
            `import ${typeOnly}{ ${names.join(', ')} } from 'nestjs-idempotency${subpath ? `/${subpath}` : ''}';\n`,
        )
        .join('');
    },
  );
  if (text !== before) {
    writeFileSync(file, text);
    console.log(`rewrote ${file}`);
  }
}
if (leftovers.length > 0) {
  console.log('\nNo longer exported (use the public API, or move the test into libs/idempotency/test):');
  for (const line of leftovers) console.log(`  ${line}`);
  process.exitCode = 1;
}
