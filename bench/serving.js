#!/usr/bin/env node
// Thin launcher for `npm run bench:serve`: the bench is TypeScript in src/bench, compiled to dist/bench.
import { existsSync } from 'node:fs';

const entry = new URL('../dist/bench/serving.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('bench: dist/bench/serving.js is missing; run `npm run compile` first\n');
  process.exit(1);
}
import(entry.href)
  .then((m) => m.main(process.argv.slice(2)))
  .then((code) => process.exit(code))
  .catch((err) => {
    process.stderr.write(`bench: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
