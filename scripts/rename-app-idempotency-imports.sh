#!/usr/bin/env bash
# One-off migration (issue 17): the library is imported by its package name, `nestjs-idempotency`,
# instead of the old `@app/idempotency` path alias. Rewrites every tracked TypeScript, JavaScript and
# Markdown file in place; run it from the repository root after merging a branch that still uses
# the alias, then `npx tsc --noEmit -p tsconfig.json`. Safe to run twice.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
git ls-files -z -- '*.ts' '*.mts' '*.cts' '*.mjs' '*.cjs' '*.js' '*.md' \
  | xargs -0 grep -lZ '@app/idempotency' 2>/dev/null \
  | xargs -0 -r sed -i 's#@app/idempotency#nestjs-idempotency#g'

# Source comments cite the HTTP contract in the repository, docs/contract.md (same rule numbers).
git ls-files -z -- '*.ts' '*.mjs' \
  | xargs -0 grep -lZE 'CONTRACT( B\.|\.md)' 2>/dev/null \
  | xargs -0 -r sed -i -E 's#`?CONTRACT\.md`?#docs/contract.md#g; s#CONTRACT B\.#docs/contract.md B.#g'
