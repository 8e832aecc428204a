#!/usr/bin/env node
// Thin launcher: the CLI lives in dist/cli (compiled from src/cli).
// A closed pipe (`rapid models | head`) ends the program quietly, as other Unix tools do.
process.stdout.on('error', (err) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});
import('../dist/cli/index.js')
  .then((m) => m.main(process.argv))
  .catch((err) => {
    process.stderr.write(`rapid: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
