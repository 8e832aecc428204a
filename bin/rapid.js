#!/usr/bin/env node
// Thin launcher: the CLI lives in dist/cli (compiled from src/cli).
import('../dist/cli/index.js')
  .then((m) => m.main(process.argv))
  .catch((err) => {
    process.stderr.write(`rapid: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
