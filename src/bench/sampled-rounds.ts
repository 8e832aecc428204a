// Sampled against greedy decode on one loaded model, in alternating rounds (greedy first in even rounds,
// sampled first in odd ones), so both see the same machine load; bench:sampling and bench:cuda report the
// per-round ratios' median and spread.
import type { NativeModel } from '../native/types.js';
import type { BenchSampling } from './bench-options.js';
import { timeDecode } from './decode-loop.js';
import { median } from './median.js';
import { SAMPLED_SAMPLING } from './sweep/workload-presets.js';

/** The sampling the sampled workload uses: temperature 0.8, nucleus top-p 0.95. */
export const SAMPLED: BenchSampling = { ...SAMPLED_SAMPLING };

export interface RoundFigures {
  level: number;
  steps: number;
  greedy: number[]; // tok/s of each round
  sampled: number[];
  ratios: number[]; // sampled / greedy of each round
  greedySampleMs: number[]; // native sampling ms per decode step, each round
  sampledSampleMs: number[];
}

export interface RoundSummary {
  greedyTokS: number; // medians over rounds
  sampledTokS: number;
  ratio: number; // median of the per-round ratios
  ratioMin: number;
  ratioMax: number;
}

export function summarizeRounds(r: RoundFigures): RoundSummary {
  return {
    greedyTokS: median(r.greedy),
    sampledTokS: median(r.sampled),
    ratio: median(r.ratios),
    ratioMin: Math.min(...r.ratios),
    ratioMax: Math.max(...r.ratios),
  };
}

async function decodeTokS(model: NativeModel, level: number, steps: number, prompt: number, sample: BenchSampling | undefined): Promise<{ tokS: number; sampleMs: number }> {
  let sampleMs = 0;
  const ms = await timeDecode(model, {
    concurrency: level,
    steps,
    prompt,
    idPrefix: sample ? 'sampled' : 'greedy',
    sample: sample ? { ...sample, seed: 1 } : undefined,
    promptToken: (i, k, vocab) => (i * 7919 + k * 104729 + 1) % vocab,
    onTimings: (t, decode) => {
      if (decode) sampleMs += t.sampleMs;
    },
  });
  return { tokS: (level * steps * 1000) / ms, sampleMs: sampleMs / steps };
}

/** `rounds` alternating greedy / sampled decode runs of `steps` steps at `level` sequences, after one short
 * warm-up of each; `onRound` sees each round's figures as they come. */
export async function measureRounds(
  model: NativeModel,
  o: { level: number; steps: number; prompt: number; rounds: number; sample: BenchSampling; warmupSteps: number },
  onRound?: (round: number, greedy: number, sampled: number) => void,
): Promise<RoundFigures> {
  const out: RoundFigures = { level: o.level, steps: o.steps, greedy: [], sampled: [], ratios: [], greedySampleMs: [], sampledSampleMs: [] };
  await decodeTokS(model, o.level, o.warmupSteps, o.prompt, undefined);
  await decodeTokS(model, o.level, o.warmupSteps, o.prompt, o.sample);
  for (let r = 0; r < o.rounds; r++) {
    const order = r % 2 === 0 ? [undefined, o.sample] : [o.sample, undefined];
    const got: { tokS: number; sampleMs: number }[] = [];
    for (const s of order) got.push(await decodeTokS(model, o.level, o.steps, o.prompt, s));
    const [g, s] = r % 2 === 0 ? [got[0]!, got[1]!] : [got[1]!, got[0]!];
    out.greedy.push(g.tokS);
    out.sampled.push(s.tokS);
    out.ratios.push(s.tokS / g.tokS);
    out.greedySampleMs.push(g.sampleMs);
    out.sampledSampleMs.push(s.sampleMs);
    onRound?.(r, g.tokS, s.tokS);
  }
  return out;
}
