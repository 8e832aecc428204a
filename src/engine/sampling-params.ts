// Sampling parameters of one request: defaults, validation with messages that say what to fix.
import type { NativeSampleParams } from '../native/types.js';
import { InvalidRequestError } from '../errors/request-errors.js';

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
  /** Added to the logits before sampling (greedy too); absent when none. */
  logitBias?: LogitBias;
}

/** OpenAI `logit_bias` in the native sampler's form: ascending token ids, one bias each. */
export interface LogitBias {
  readonly tokens: Int32Array;
  readonly values: Float32Array;
}

/** As OpenAI takes it: token id (a decimal string key) → bias in [-100, 100]. */
export type LogitBiasInput = Readonly<Record<string, number>>;

export type SamplingInput = Partial<Omit<SamplingParams, 'logitBias'>> & { logitBias?: LogitBiasInput };

/**
 * The accepted range of every sampling parameter: the one source of truth for the request layer
 * (HTTP, CLI) and the bounds the native sampler can represent (int32 top_k and logprobs, float32
 * temperature and penalties, seeds below 2^53).
 */
export const SAMPLING_LIMITS = {
  maxTemperature: 100,
  /** Temperatures in (0, this) are greedy (as vLLM does): 1/T would overflow float32 logits. */
  greedyBelowTemperature: 1e-5,
  /** A top_p below the top token's probability keeps only that token; any such value acts the same,
   *  so tiny values are raised to one float32 holds (top token prob >= 1/vocab > this). */
  minTopP: 1e-8,
  /** int32 on the native side; -1 (vLLM) and 0 turn it off; values >= the vocabulary mean all tokens. */
  maxTopK: 2 ** 31 - 1,
  /** Below this, logit / penalty overflows float32 (the sampler would see no finite logit). */
  minRepetitionPenalty: 0.01,
  maxRepetitionPenalty: 10,
  maxAbsPresencePenalty: 2,
  maxAbsFrequencyPenalty: 2,
  maxSeed: Number.MAX_SAFE_INTEGER,
  maxStopStrings: 16,
  /** Output is held back while it may start a stop string: a long one would stall streaming. */
  maxStopLength: 1024,
  maxTopLogprobs: 20,
  /** logit_bias: OpenAI's range; -100 in effect bans a token, +100 forces it. */
  maxAbsLogitBias: 100,
  /** logit_bias entries per request (OpenAI's bound): each is work on every sampled token. */
  maxLogitBiasEntries: 300,
} as const;

const L = SAMPLING_LIMITS;

function check(cond: boolean, param: string, message: string, got?: unknown): void {
  if (!cond) throw new InvalidRequestError(`${param}: ${message}${got === undefined ? '' : `, got ${show(got)}`}`, param);
}

/** A value as the user wrote it, shortened: strings and arrays can be megabytes. */
function show(v: unknown): string {
  const s = typeof v === 'number' ? String(v) : (JSON.stringify(v) ?? String(v));
  return s.length > 40 ? `${s.slice(0, 37)}...` : s;
}

function finite(v: number): boolean {
  return typeof v === 'number' && Number.isFinite(v);
}

function inRange(v: number, lo: number, hi: number): boolean {
  return finite(v) && v >= lo && v <= hi;
}

/** A random seed when the caller gave none, so sampled runs differ unless pinned. */
export function randomSeed(): number {
  return Math.floor(Math.random() * 2 ** 32);
}

/**
 * Fills defaults and checks every parameter against SAMPLING_LIMITS; throws InvalidRequestError
 * naming the parameter (wire name), its allowed range and the value given. Normalizes what has one
 * meaning spelled several ways (top_k -1 is 0, tiny temperatures are greedy, tiny top_p is raised).
 */
export function resolveSamplingParams(input: SamplingInput, defaults: { maxTokens: number; vocabSize?: number }): SamplingParams {
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
  check(inRange(p.temperature, 0, L.maxTemperature), 'temperature', `must be a number in [0, ${L.maxTemperature}] (0 is greedy)`, p.temperature);
  check(finite(p.topP) && p.topP > 0 && p.topP <= 1, 'top_p', 'must be in (0, 1]', p.topP);
  check(Number.isInteger(p.topK) && p.topK >= -1 && p.topK <= L.maxTopK, 'top_k', `must be an integer in [-1, ${L.maxTopK}] (-1 or 0 turns it off)`, p.topK);
  check(inRange(p.minP, 0, 1), 'min_p', 'must be a number in [0, 1]', p.minP);
  check(inRange(p.repetitionPenalty, L.minRepetitionPenalty, L.maxRepetitionPenalty), 'repetition_penalty',
    `must be a number in [${L.minRepetitionPenalty}, ${L.maxRepetitionPenalty}] (1 turns it off)`, p.repetitionPenalty);
  check(inRange(p.presencePenalty, -L.maxAbsPresencePenalty, L.maxAbsPresencePenalty), 'presence_penalty',
    `must be a number in [-${L.maxAbsPresencePenalty}, ${L.maxAbsPresencePenalty}]`, p.presencePenalty);
  check(inRange(p.frequencyPenalty, -L.maxAbsFrequencyPenalty, L.maxAbsFrequencyPenalty), 'frequency_penalty',
    `must be a number in [-${L.maxAbsFrequencyPenalty}, ${L.maxAbsFrequencyPenalty}]`, p.frequencyPenalty);
  check(Number.isInteger(p.seed) && p.seed >= 0 && p.seed <= L.maxSeed, 'seed', `must be an integer in [0, ${L.maxSeed}]`, p.seed);
  // Beyond the context is fine: the engine stops at the context length (finish_reason "length").
  check(Number.isInteger(p.maxTokens) && p.maxTokens >= 1, 'max_tokens', 'must be an integer >= 1', p.maxTokens);
  check(Array.isArray(p.stop), 'stop', 'must be a list of strings', p.stop);
  check(p.stop.length <= L.maxStopStrings, 'stop', `at most ${L.maxStopStrings} stop strings, got ${p.stop.length}`);
  for (const s of p.stop) {
    check(typeof s === 'string' && s.length > 0, 'stop', 'stop strings must be non-empty strings', s);
    check(s.length <= L.maxStopLength, 'stop', `each stop string must be at most ${L.maxStopLength} characters, got one of ${s.length}`);
  }
  check(Number.isInteger(p.logprobs) && p.logprobs >= -1 && p.logprobs <= L.maxTopLogprobs, 'logprobs',
    `top logprobs must be an integer in [0, ${L.maxTopLogprobs}]`, p.logprobs);
  if (input.logitBias !== undefined) {
    const bias = resolveLogitBias(input.logitBias, defaults.vocabSize);
    if (bias.tokens.length > 0) p.logitBias = bias;
  }
  if (p.topK === -1) p.topK = 0;
  if (p.temperature < L.greedyBelowTemperature) p.temperature = 0;
  p.topP = Math.max(p.topP, L.minTopP);
  if (Object.is(p.seed, -0)) p.seed = 0;
  return p;
}

/**
 * OpenAI's logit_bias map as the sampler takes it (ascending ids); checks keys (decimal token ids,
 * below `vocabSize` when given), values and the entry count, naming `logit_bias`.
 */
export function resolveLogitBias(input: LogitBiasInput, vocabSize?: number): LogitBias {
  const param = 'logit_bias';
  check(typeof input === 'object' && input !== null && !Array.isArray(input), param, 'must be an object mapping token ids to biases', input);
  const keys = Object.keys(input);
  check(keys.length <= L.maxLogitBiasEntries, param, `at most ${L.maxLogitBiasEntries} entries, got ${keys.length}`);
  const entries: Array<[number, number]> = [];
  const seen = new Set<number>();
  for (const key of keys) {
    const id = /^[0-9]{1,10}$/.test(key) ? Number(key) : NaN;
    check(Number.isSafeInteger(id), param, 'keys must be token ids (non-negative integers)', key);
    const limit = vocabSize === undefined ? 2 ** 31 - 1 : vocabSize - 1;
    check(id <= limit, param, vocabSize === undefined ? 'token id too large' : `token id ${id} is outside the vocabulary [0, ${vocabSize})`, vocabSize === undefined ? key : undefined);
    check(!seen.has(id), param, `token id ${id} is given twice`);
    seen.add(id);
    const v = input[key];
    check(typeof v === 'number' && inRange(v, -L.maxAbsLogitBias, L.maxAbsLogitBias), `${param}.${key}`,
      `must be a number in [-${L.maxAbsLogitBias}, ${L.maxAbsLogitBias}]`, v);
    entries.push([id, v as number]);
  }
  entries.sort((a, b) => a[0] - b[0]);
  return { tokens: Int32Array.from(entries, (e) => e[0]), values: Float32Array.from(entries, (e) => e[1]) };
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
