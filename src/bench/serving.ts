// Serving benchmark: aggregate decode throughput of the continuous-batching engine at several
// concurrency levels on the random-weight Qwen2.5-0.5B-shaped 4-bit checkpoint (prompt 128 /
// output 128 by default), with time-to-first-token and inter-token latency p50/p99. It drives the
// Engine in-process (HTTP adds nothing measurable at these rates); prompts are token ids.
// With --schema FILE (or --schema default) each level runs twice, free and schema-constrained
// (xgrammar over a synthetic byte-level vocabulary of the model's size), and reports the
// throughput ratio and the grammar's mask time per token against the step time.
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { Engine } from '../engine/engine.js';
import { median } from './median.js';
import { GrammarService, type GrammarTokenizer } from '../engine/grammar/grammar-service.js';
import type { GrammarNext, GrammarPick, RequestGrammar } from '../engine/grammar/request-grammar.js';
import { parseResponseFormat, type ResponseFormat } from '../server/response-format.js';
import { resolveSamplingParams } from '../engine/sampling-params.js';
import { loadNative } from '../native/binding.js';
import type { NativeImageInput, NativeLateMask, NativeModel } from '../native/types.js';
import { ensureRandomCheckpoint } from './random-checkpoint.js';

export interface ServingLevel {
  concurrency: number;
  requests: number;
  generatedTokens: number;
  wallS: number;
  /** Generated tokens / wall time of the whole level (prefill included). */
  outputTokS: number;
  /** Tokens generated while every request was decoding / that window (llama-batched-bench's S_TG). */
  decodeTokS: number;
  ttftMs: { p50: number; p99: number };
  itlMs: { p50: number; p99: number };
  steps: number;
  meanRowsPerStep: number;
  /** Mean time inside the native step (forward + sampling), from the engine's await of it. */
  nativeStepMs: number;
  /** Constrained runs only: time in the grammar (mask + accept), per generated token and in all. */
  grammar?: { maskMsPerToken: number; maskMsTotal: number; maskShareOfWall: number; stepMsMean: number; speculated: number; misses: number };
}

/** Time spent inside native steps (all engines of this process). */
const nativeClock = { ms: 0, steps: 0 };

/** The model with its step timed into nativeClock. */
function timedModel(model: NativeModel): NativeModel {
  return {
    info: () => model.info(),
    encodeImage: (image) => model.encodeImage(image),
    ...(model.encodeImages ? { encodeImages: (images: NativeImageInput[]) => model.encodeImages!(images) } : {}),
    close: () => model.close(),
    // Forwarded so constrained steps take their masks late (computed while the forward runs).
    ...(model.supplyMasks ? { supplyMasks: (stepId: number, masks: NativeLateMask[]) => model.supplyMasks!(stepId, masks) } : {}),
    async step(plan) {
      const t = performance.now();
      try {
        return await model.step(plan);
      } finally {
        nativeClock.ms += performance.now() - t;
        nativeClock.steps++;
      }
    },
  };
}

/** Times a matcher's work: next() (the token mask) and accept(). */
class TimedGrammar implements RequestGrammar {
  constructor(
    private readonly inner: RequestGrammar,
    private readonly clock: { ms: number; tokens: number; speculated: number; misses: number },
  ) {}
  async next(): Promise<GrammarNext> {
    const t = performance.now();
    try {
      return await this.inner.next();
    } finally {
      this.clock.ms += performance.now() - t;
    }
  }
  accept(token: number): boolean {
    const t = performance.now();
    const ok = this.inner.accept(token);
    this.clock.ms += performance.now() - t;
    this.clock.tokens++;
    return ok;
  }
  // Speculation (the engine skips the mask in wide states) is forwarded and timed like the mask.
  async speculate(): Promise<boolean> {
    const t = performance.now();
    const wide = (await this.inner.speculate?.()) ?? false;
    this.clock.ms += performance.now() - t;
    return wide;
  }
  async acceptBest(candidates: readonly number[]): Promise<GrammarPick> {
    const t = performance.now();
    try {
      const pick = await this.inner.acceptBest!(candidates);
      if (pick.kind === 'token') this.clock.tokens++;
      else if (pick.kind === 'miss') this.clock.misses++;
      this.clock.speculated++;
      return pick;
    } finally {
      this.clock.ms += performance.now() - t;
    }
  }
  dispose(): void {
    this.inner.dispose();
  }
}

/** GPT-2's byte-level alphabet (byte -> printable char), as Qwen's tokenizer uses. */
function byteLevelAlphabet(): string[] {
  const bs: number[] = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const chars = new Array<string>(256);
  let n = 0;
  for (let b = 0; b < 256; b++) chars[b] = String.fromCharCode(bs.includes(b) ? b : 256 + n++);
  return chars;
}

/**
 * A stand-in for Qwen's 151,936-token byte-level BPE vocabulary (no tokenizer ships with the random
 * checkpoint): 256 byte tokens, then deterministic words, space-prefixed words, digit runs and JSON
 * punctuation pieces, and the last 22 ids special. Mask cost depends on the vocabulary's size and
 * shape, which this keeps; exact figures on a real checkpoint will differ somewhat.
 */
export function syntheticByteLevelTokenizer(vocabSize: number): GrammarTokenizer {
  const alpha = byteLevelAlphabet();
  const inverse = new Map(alpha.map((c, b) => [c, b]));
  const tokens: string[] = [...alpha];
  const seen = new Set(tokens);
  let s = 12345;
  const rnd = (n: number) => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s % n);
  const letters = 'etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLC';
  const punct = ['{"', '":', '",', '"}', '},', '":"', '":[', '],', '"]', '[{', '}]', '{', '}', ':', ',', '."', '\n', '\"', '...', '()', '->'];
  const special = 22;
  while (tokens.length < vocabSize - special) {
    const kind = rnd(10);
    let t: string;
    if (kind < 6) t = Array.from({ length: 1 + rnd(8) }, () => letters[rnd(letters.length)]).join('');
    else if (kind < 8) t = Array.from({ length: 1 + rnd(3) }, () => String(rnd(10))).join('');
    else t = punct[rnd(punct.length)]! + (rnd(2) ? letters[rnd(letters.length)]! : '');
    if (rnd(2)) t = ' ' + t;
    const enc = [...Buffer.from(t, 'utf8')].map((b) => alpha[b]!).join('');
    if (seen.has(enc)) continue;
    seen.add(enc);
    tokens.push(enc);
  }
  for (let i = 0; i < special; i++) tokens.push(`<|special_${i}|>`);
  const isSpecialId = (id: number) => id >= vocabSize - special;
  return {
    vocabSize,
    decoderTypes: new Set(['ByteLevel']),
    idToToken: (id) => tokens[id],
    isSpecialId,
    decode(ids, options) {
      const bytes: number[] = [];
      for (const id of ids) {
        if (isSpecialId(id)) {
          if (options?.skipSpecialTokens !== true) bytes.push(...Buffer.from(tokens[id]!, 'utf8'));
          continue;
        }
        for (const ch of tokens[id] ?? '') bytes.push(inverse.get(ch) ?? 63);
      }
      return Buffer.from(bytes).toString('utf8');
    },
  };
}

/**
 * The schema of --schema default: an object whose array needs at least 64 strings, so no request
 * completes before --gen tokens and both passes generate the same number of tokens per request.
 */
export const DEFAULT_BENCH_SCHEMA = {
  type: 'object',
  properties: {
    kind: { enum: ['alpha', 'beta', 'gamma'] },
    score: { type: 'number', minimum: 0, maximum: 100 },
    items: { type: 'array', items: { type: 'string', minLength: 2, maxLength: 12 }, minItems: 64 },
  },
  required: ['kind', 'score', 'items'],
  additionalProperties: false,
};

export interface LevelGrammar {
  service: GrammarService;
  format: ResponseFormat;
}

function pct(xs: number[], p: number): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

const round = (x: number) => Math.round(x * 10) / 10;

export async function runLevel(
  engine: Engine,
  concurrency: number,
  promptTokens: number,
  genTokens: number,
  vocab: number,
  salt: number,
  constrained?: LevelGrammar,
): Promise<ServingLevel> {
  let s = (salt * 2654435761) >>> 0;
  const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s);
  const params = resolveSamplingParams({ temperature: 0, maxTokens: genTokens }, { maxTokens: genTokens });
  const steps0 = engine.stats().steps;
  const native0 = { ...nativeClock };
  const ttft: number[] = [];
  const itl: number[] = [];
  const firstAt: number[] = [];
  const doneAt: number[] = [];
  const tokenTimes: number[] = [];
  const clock = { ms: 0, tokens: 0, speculated: 0, misses: 0 };
  // Matchers are made before the clock starts: compiling is cached per schema, not per request.
  const grammars = constrained
    ? await Promise.all(Array.from({ length: concurrency }, async () => new TimedGrammar(await constrained.service.matcher(constrained.format), clock)))
    : [];
  const t1 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, k) => {
      const promptIds = Array.from({ length: promptTokens }, () => 10 + (rnd() % (vocab - 20)));
      const start = performance.now();
      let last = 0;
      for await (const ev of engine.generate({ promptIds, params, grammar: grammars[k] })) {
        const now = performance.now();
        if (ev.type === 'delta') {
          tokenTimes.push(now);
          if (last === 0) {
            ttft.push(now - start);
            firstAt.push(now);
          } else itl.push(now - last);
          last = now;
        } else doneAt.push(now);
      }
    }),
  );
  const wall = performance.now() - t1;
  const allDecoding = Math.max(...firstAt);
  const end = Math.max(...doneAt);
  const inWindow = tokenTimes.filter((t) => t > allDecoding && t <= end).length;
  const steps = engine.stats().steps - steps0;
  return {
    concurrency,
    requests: concurrency,
    generatedTokens: tokenTimes.length,
    wallS: Math.round(wall / 100) / 10,
    outputTokS: round((tokenTimes.length / wall) * 1000),
    decodeTokS: end > allDecoding ? round((inWindow / (end - allDecoding)) * 1000) : 0,
    ttftMs: { p50: round(pct(ttft, 50)), p99: round(pct(ttft, 99)) },
    itlMs: { p50: round(pct(itl, 50)), p99: round(pct(itl, 99)) },
    steps,
    meanRowsPerStep: round((tokenTimes.length + concurrency * Math.ceil(promptTokens / 512)) / Math.max(1, steps)),
    nativeStepMs: round((nativeClock.ms - native0.ms) / Math.max(1, nativeClock.steps - native0.steps)),
    ...(constrained
      ? {
          grammar: {
            maskMsPerToken: Math.round((clock.ms / Math.max(1, clock.tokens)) * 1000) / 1000,
            maskMsTotal: Math.round(clock.ms),
            maskShareOfWall: Math.round((clock.ms / wall) * 1000) / 1000,
            speculated: clock.speculated,
            misses: clock.misses,
            stepMsMean: round(wall / Math.max(1, steps)),
          },
        }
      : {}),
  };
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      threads: { type: 'string' },
      prompt: { type: 'string' },
      gen: { type: 'string' },
      levels: { type: 'string' },
      precision: { type: 'string' },
      'max-batched-tokens': { type: 'string' },
      schema: { type: 'string' },
      // A/B: constrained rows always take the grammar mask (no speculative greedy rows).
      'no-speculation': { type: 'boolean' },
      json: { type: 'boolean' },
    },
  });
  const threads = Number(values.threads ?? 2);
  const promptTokens = Number(values.prompt ?? 128);
  const genTokens = Number(values.gen ?? 128);
  const levels = (values.levels ?? '1,2,4,8,16').split(',').map(Number);
  const precision = (values.precision ?? 'fast') as 'exact' | 'fast';
  const ckpt = ensureRandomCheckpoint();
  const native = loadNative();
  const maxC = Math.max(...levels);
  // f32 K and V of 24 layers x 2 KV heads x 64 dims per token, doubled for slack.
  const kvBytesPerToken = 24 * 2 * 2 * 64 * 4;
  const kvCacheBytes = Math.max(64 << 20, maxC * (promptTokens + genTokens + 32) * kvBytesPerToken * 2);
  const model = native.addon.loadModel(ckpt.dir, { threads, precision, kvCacheBytes });
  const info = model.info();
  const engine = new Engine({
    model: timedModel(model),
    // One visible character per token, so every token yields a delta to time.
    newTextStream: () => ({ push: () => '.', flush: () => '' }),
    stopTokenIds: [],
    maxNumSeqs: maxC,
    maxBatchedTokens: Number(values['max-batched-tokens'] ?? 512),
    enablePrefixCache: false,
    stepTimeoutMs: 600_000,
    speculativeGrammar: values['no-speculation'] !== true,
  });
  const load0 = loadavg()[0]!;
  let constrained: LevelGrammar | undefined;
  if (values.schema !== undefined) {
    const schema = values.schema === 'default' ? DEFAULT_BENCH_SCHEMA : (JSON.parse(readFileSync(values.schema, 'utf8')) as unknown);
    const format = parseResponseFormat({ type: 'json_schema', json_schema: { name: 'bench', schema, strict: true } })!;
    const tokenizer = syntheticByteLevelTokenizer(info.vocabSize);
    const service = new GrammarService({ tokenizer, vocabSize: info.vocabSize, stopTokenIds: [info.vocabSize - 22] });
    const t = performance.now();
    (await service.matcher(format)).dispose(); // tokenizer info + compile, outside the timed runs
    if (!values.json) process.stderr.write(`grammar ready in ${Math.round(performance.now() - t)} ms (vocab ${info.vocabSize})\n`);
    constrained = { service, format };
  }
  // Warm-up: page in the weights, size scratch buffers.
  await runLevel(engine, 1, 16, 4, info.vocabSize, 999);
  // Resident memory after decode steps ran (weights and their CPU copies, scratch; KV pages as written).
  const rssAfterWarmupMiB = Math.round(process.memoryUsage().rss / 2 ** 20);
  if (!values.json) process.stderr.write(`resident memory after warm-up decode: ${rssAfterWarmupMiB} MiB\n`);
  const results: ServingLevel[] = [];
  const constrainedResults: ServingLevel[] = [];
  const line = (tag: string, r: ServingLevel) =>
    `${tag ? tag.padEnd(12) : ''}c=${String(r.concurrency).padStart(2)}  decode ${String(r.decodeTokS).padStart(6)} tok/s  output ${String(r.outputTokS).padStart(6)} tok/s  ` +
    `TTFT p50 ${r.ttftMs.p50} ms p99 ${r.ttftMs.p99} ms  ITL p50 ${r.itlMs.p50} ms p99 ${r.itlMs.p99} ms  (${r.wallS}s, ${r.steps} steps, native step ${r.nativeStepMs} ms)\n`;
  for (const [i, c] of levels.entries()) {
    // With --schema, odd repeats run the constrained pass first, so a drifting load on a shared
    // machine does not always favour the same side.
    const constrainedFirst = constrained !== undefined && i % 2 === 1;
    // Same prompts (same salt) in both passes; constrained requests each get their own matcher.
    let k = constrainedFirst ? await runLevel(engine, c, promptTokens, genTokens, info.vocabSize, c, constrained) : undefined;
    const r = await runLevel(engine, c, promptTokens, genTokens, info.vocabSize, c);
    results.push(r);
    if (!values.json) process.stderr.write(line(constrained ? 'free' : '', r));
    if (!constrained) continue;
    k ??= await runLevel(engine, c, promptTokens, genTokens, info.vocabSize, c, constrained);
    constrainedResults.push(k);
    if (!values.json) {
      const g = k.grammar!;
      process.stderr.write(line('constrained', k));
      process.stderr.write(
        `            ratio output ${(k.outputTokS / r.outputTokS).toFixed(3)}  decode ${(k.decodeTokS / Math.max(1e-9, r.decodeTokS)).toFixed(3)}  ` +
          `mask ${g.maskMsPerToken} ms/token (${Math.round(g.maskShareOfWall * 1000) / 10}% of wall)  step ${g.stepMsMean} ms  speculated ${g.speculated} (${g.misses} missed)${constrainedFirst ? '  (constrained ran first)' : ''}\n`,
      );
    }
  }
  if (constrained && !values.json && constrainedResults.length > 1) {
    const out = median(constrainedResults.map((k, i) => k.outputTokS / results[i]!.outputTokS));
    const dec = median(constrainedResults.map((k, i) => k.decodeTokS / Math.max(1e-9, results[i]!.decodeTokS)));
    process.stderr.write(`median ratio over ${constrainedResults.length} pairs: output ${out.toFixed(3)}  decode ${dec.toFixed(3)}\n`);
  }
  const report = {
    date: new Date().toISOString(),
    cpu: cpus()[0]?.model ?? 'unknown',
    load: { start: load0, end: loadavg()[0]! },
    binary: native.path,
    checkpoint: ckpt.dir,
    model: { family: info.family, quantization: info.quantization, threads: info.threads, precision: info.precision, blockSize: info.blockSize, numBlocks: info.numBlocks },
    options: { promptTokens, genTokens, levels, maxBatchedTokens: Number(values['max-batched-tokens'] ?? 512), schema: values.schema ?? null, speculativeGrammar: values['no-speculation'] !== true },
    levels: results,
    memory: { rssAfterWarmupMiB, rssEndMiB: Math.round(process.memoryUsage().rss / 2 ** 20) },
    ...(constrained
      ? {
          constrained: constrainedResults,
          ratios: constrainedResults.map((k, i) => ({
            concurrency: k.concurrency,
            outputTokS: Math.round((k.outputTokS / results[i]!.outputTokS) * 1000) / 1000,
            decodeTokS: Math.round((k.decodeTokS / Math.max(1e-9, results[i]!.decodeTokS)) * 1000) / 1000,
          })),
        }
      : {}),
  };
  process.stdout.write(`${JSON.stringify(report, null, values.json ? 0 : 2)}\n`);
  model.close();
  return 0;
}
