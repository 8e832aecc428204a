#!/bin/sh
# The long run of the bad-model-files test: every corruption of every fixture family (~7,500 loads in child
# processes, a few minutes on 2 cores). CI runs a seeded sample of 2 per class and fixture instead.
# Usage: bench/corrupt-models.sh [seed]
set -e
cd "$(dirname "$0")/.."
npm run compile >/dev/null
RAPID_CORRUPT_PER_CLASS=0 RAPID_CORRUPT_SEED="${1:-38}" exec npx vitest run test/models/corrupt-checkpoint.test.ts
