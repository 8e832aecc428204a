#!/usr/bin/env node
// Launcher for `npm run bench:<name>`: each bench is TypeScript in src/bench, compiled to dist/bench.
import { existsSync } from 'node:fs';

const [name, ...args] = process.argv.slice(2);
const entry = new URL(`../dist/bench/${name}.js`, import.meta.url);
if (!name || !existsSync(entry)) {
  process.stderr.write(`bench: dist/bench/${name ?? '<name>'}.js is missing; run \`npm run compile\` first\n`);
  process.exit(1);
}
import(entry.href)
  .then((m) => m.main(args))
  .then((code) => process.exit(code))
  .catch((err) => {
    process.stderr.write(`bench: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
