// Sampling parameters of one request: defaults, validation with messages that say what to fix.
import type { NativeSampleParams } from '../native/types.js';
import { InvalidRequestError } from './errors.js';

export interface SamplingParams {
  temperature: number;
  topP: number;
  topK: number;
  minP: number;
  repetitionPenalty: number;
  presencePenalty: number;
  frequencyPenalty: number;
  seed: number;
  maxTokens: number;
  stop: string[];
  /** -1: none; 0: sampled token only; k: plus the top k alternatives. */
  logprobs: number;
}

export type SamplingInput = Partial<SamplingParams>;

const MAX_SEED = Number.MAX_SAFE_INTEGER;

function check(cond: boolean, param: string, message: string): void {
  if (!cond) throw new InvalidRequestError(`${param}: ${message}`, param);
}

function finite(v: number): boolean {
  return typeof v === 'number' && Number.isFinite(v);
}

/** A random seed when the caller gave none, so sampled runs differ unless pinned. */
export function randomSeed(): number {
  return Math.floor(Math.random() * 2 ** 32);
}

export function resolveSamplingParams(input: SamplingInput, defaults: { maxTokens: number }): SamplingParams {
  const p: SamplingParams = {
    temperature: input.temperature ?? 1,
    topP: input.topP ?? 1,
    topK: input.topK ?? 0,
    minP: input.minP ?? 0,
    repetitionPenalty: input.repetitionPenalty ?? 1,
    presencePenalty: input.presencePenalty ?? 0,
    frequencyPenalty: input.frequencyPenalty ?? 0,
    seed: input.seed ?? randomSeed(),
    maxTokens: input.maxTokens ?? defaults.maxTokens,
    stop: input.stop ?? [],
    logprobs: input.logprobs ?? -1,
  };
  check(finite(p.temperature) && p.temperature >= 0 && p.temperature <= 100, 'temperature', 'must be a number in [0, 100]');
  check(finite(p.topP) && p.topP > 0 && p.topP <= 1, 'top_p', 'must be in (0, 1]');
  check(Number.isInteger(p.topK) && p.topK >= 0, 'top_k', 'must be an integer >= 0 (0 disables it)');
  check(finite(p.minP) && p.minP >= 0 && p.minP <= 1, 'min_p', 'must be in [0, 1]');
  check(finite(p.repetitionPenalty) && p.repetitionPenalty > 0 && p.repetitionPenalty <= 10, 'repetition_penalty', 'must be in (0, 10]');
  check(finite(p.presencePenalty) && Math.abs(p.presencePenalty) <= 2, 'presence_penalty', 'must be in [-2, 2]');
  check(finite(p.frequencyPenalty) && Math.abs(p.frequencyPenalty) <= 2, 'frequency_penalty', 'must be in [-2, 2]');
  check(Number.isInteger(p.seed) && p.seed >= 0 && p.seed <= MAX_SEED, 'seed', `must be an integer in [0, ${MAX_SEED}]`);
  check(Number.isInteger(p.maxTokens) && p.maxTokens >= 1, 'max_tokens', 'must be an integer >= 1');
  check(Array.isArray(p.stop) && p.stop.length <= 16, 'stop', 'at most 16 stop strings');
  for (const s of p.stop) check(typeof s === 'string' && s.length > 0, 'stop', 'stop strings must be non-empty strings');
  check(Number.isInteger(p.logprobs) && p.logprobs >= -1 && p.logprobs <= 20, 'logprobs', 'top logprobs must be an integer in [0, 20]');
  return p;
}

/** Greedy native sampling for the first token (argmax, no penalties); spread it and set `counter`. */
export const GREEDY_SAMPLE: Readonly<NativeSampleParams> = {
  temperature: 0,
  topP: 1,
  topK: 0,
  minP: 0,
  repetitionPenalty: 1,
  presencePenalty: 0,
  frequencyPenalty: 0,
  seed: 0,
  counter: 0,
  logprobs: -1,
};
