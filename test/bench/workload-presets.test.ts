// The preset workloads of `rapid bench --workload` (sampled, long-prompt): what they select and what each
// request carries on the wire.
import { describe, expect, it } from 'vitest';
import { workloadKinds } from '../../src/bench/sweep/run-bench.js';
import { requestBody } from '../../src/bench/sweep/stream-request.js';
import { generateRequests } from '../../src/bench/sweep/workload.js';
import { LONG_PROMPT_WORDS, SAMPLED_SAMPLING, workloadPreset } from '../../src/bench/sweep/workload-presets.js';

describe('rapid bench preset workloads', () => {
  it('sampled and long-prompt are free text with preset settings', () => {
    expect(workloadKinds('sampled', false, false)).toEqual(['text']);
    expect(workloadKinds('long-prompt', false, false)).toEqual(['text']);
    expect(workloadPreset('sampled')).toEqual({ temperature: 0.8, topP: 0.95 });
    expect(workloadPreset('long-prompt')).toEqual({ promptLen: String(LONG_PROMPT_WORDS) });
    expect(workloadPreset('text')).toEqual({});
    expect(() => workloadKinds('nope' as never, false, false)).toThrow(/text, sampled, long-prompt, schema, vision, mixed or extraction/);
  });

  it('top_p travels with every request only when set', () => {
    const base = { kinds: ['text' as const], promptLength: { kind: 'fixed' as const, value: 4 }, outputLength: { kind: 'fixed' as const, value: 8 }, maxTokens: 8, seed: 1 };
    const [plain] = generateRequests(base, 1, 1, 1);
    expect(requestBody({ endpoint: 'http://x' }, plain!, 0)).not.toHaveProperty('top_p');
    const [sampled] = generateRequests({ ...base, topP: SAMPLED_SAMPLING.topP }, 1, 1, 1);
    expect(requestBody({ endpoint: 'http://x' }, sampled!, SAMPLED_SAMPLING.temperature)).toMatchObject({ temperature: 0.8, top_p: 0.95 });
  });
});
