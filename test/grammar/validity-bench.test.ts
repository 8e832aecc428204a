// The CI cut of `npm run bench:validity` (issue 38): schema requests mixed with free text at
// concurrency 1 to 64 on a real server, sampled, with max_tokens from each schema's shortest output
// to 24 tokens past it (many replies are cut): 100% of schema replies parse, validate and hold no
// U+FFFD, on a byte-fallback (llama) and a byte-level (qwen2) vocabulary.
import { describe, expect, it } from 'vitest';
import { runValiditySweep, validityTable } from '../../src/bench/validity.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';

describe.skipIf(!nativeAvailable())('structured-output validity sweep', () => {
  it.each([
    ['llama-q4', [1, 2, 4, 8, 16, 32, 64], 2],
    ['qwen2-q4', [1, 4, 16, 64], 1],
  ] as const)('%s: every schema reply valid at every level', async (name, levels, runs) => {
    const result = await runValiditySweep({ model: `${FIXTURE_ROOT}/${name}`, levels: [...levels], runs, budgetClose: true });
    const table = validityTable(result);
    for (const l of result) {
      expect(l.errors, table + '\n' + l.failures.join('\n')).toBe(0);
      expect(l.valid, table + '\n' + l.failures.join('\n')).toBe(l.schemaReplies);
      expect(l.replacement).toBe(0);
    }
    expect(result.reduce((n, l) => n + l.cutValid, 0)).toBeGreaterThan(10); // max_tokens did cut
  }, 240_000);
});
