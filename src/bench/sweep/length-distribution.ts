// Prompt and output length distributions from flags: "128", "fixed:128", "uniform:64-256",
// "normal:128,32" (clamped to [1, 4 x mean]). Lengths are in words for prompts, tokens for outputs.
import { randInt, randNormal, type Rng } from './rng.js';

export type LengthDistribution =
  | { kind: 'fixed'; value: number }
  | { kind: 'uniform'; min: number; max: number }
  | { kind: 'normal'; mean: number; std: number };

function positiveInt(s: string, spec: string): number {
  if (!/^\d+$/.test(s.trim())) throw new Error(`length distribution "${spec}": "${s}" is not a positive integer`);
  const n = Number.parseInt(s, 10);
  if (n < 1) throw new Error(`length distribution "${spec}": lengths must be at least 1`);
  return n;
}

export function parseLengthDistribution(spec: string): LengthDistribution {
  const s = spec.trim();
  const [kind, rest] = s.includes(':') ? [s.slice(0, s.indexOf(':')), s.slice(s.indexOf(':') + 1)] : ['fixed', s];
  switch (kind) {
    case 'fixed':
      return { kind: 'fixed', value: positiveInt(rest, spec) };
    case 'uniform': {
      const parts = rest.split(/[-,]/);
      if (parts.length !== 2) throw new Error(`length distribution "${spec}": expected uniform:MIN-MAX`);
      const min = positiveInt(parts[0]!, spec);
      const max = positiveInt(parts[1]!, spec);
      if (max < min) throw new Error(`length distribution "${spec}": MAX is below MIN`);
      return { kind: 'uniform', min, max };
    }
    case 'normal': {
      const parts = rest.split(',');
      if (parts.length !== 2) throw new Error(`length distribution "${spec}": expected normal:MEAN,STD`);
      const mean = positiveInt(parts[0]!, spec);
      const std = Number(parts[1]);
      if (!Number.isFinite(std) || std < 0) throw new Error(`length distribution "${spec}": STD must be a number >= 0`);
      return { kind: 'normal', mean, std };
    }
    default:
      throw new Error(`length distribution "${spec}": unknown kind "${kind}" (fixed, uniform or normal)`);
  }
}

export function sampleLength(d: LengthDistribution, rng: Rng): number {
  switch (d.kind) {
    case 'fixed':
      return d.value;
    case 'uniform':
      return randInt(rng, d.min, d.max);
    case 'normal':
      return Math.min(4 * d.mean, Math.max(1, Math.round(d.mean + d.std * randNormal(rng))));
  }
}

export function describeLengthDistribution(d: LengthDistribution): string {
  switch (d.kind) {
    case 'fixed':
      return `${d.value}`;
    case 'uniform':
      return `uniform ${d.min}-${d.max}`;
    case 'normal':
      return `normal mean ${d.mean} std ${d.std}`;
  }
}
