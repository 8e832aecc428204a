// Speculative decoding bench (npm run bench:spec): batch-1 decode tok/s with n-gram drafts against
// without, same model, same requests, alternating order over several rounds, on the random-weight
// Qwen2.5-0.5B-shaped 4-bit checkpoint. Random weights do not copy text, so the extraction workload
// is one whose greedy continuation repeats: the prompt is a token "document" quoted three times and
// the model's greedy output loops; acceptance is reported, since it is a property of the model. The
// no-match workload samples at temperature 1 over the whole vocabulary (near uniform on random
// weights), so no draft is ever proposed: what the lookup costs. all-wrong is the extraction workload
// with every draft's first token changed: each draft is verified and rejected, the policy's worst case.
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { Engine } from '../engine/engine.js';
import { resolveSamplingParams, type SamplingInput } from '../engine/sampling-params.js';
import type { SpeculativeMode } from '../engine/speculative/speculator.js';
import type { DraftSource } from '../engine/speculative/draft-source.js';
import { NgramDraftSource } from '../engine/speculative/ngram-source.js';
import { loadNative } from '../native/binding.js';
import type { NativeModel } from '../native/types.js';
import { intOption, precisionOption } from './bench-options.js';
import { median } from './median.js';
import { ensureRandomCheckpoint, hash32 } from './random-checkpoint.js';

const USAGE = `npm run bench:spec -- [--rounds N] [--gen N] [--doc N] [--threads N] [--precision fast|exact] [--device cpu|cuda] [--only extraction,no-match,all-wrong] [--json]`;

interface Workload {
  name: string;
  prompt: number[];
  sampling: SamplingInput;
  /** Drafts from this source instead of the n-gram one. */
  source?: DraftSource;
}

/** The worst case of the policy: the n-gram draft with its first token changed, so verification keeps nothing. */
function alwaysWrong(vocab: number): DraftSource {
  const ngram = new NgramDraftSource({ minN: 1 });
  return { name: 'wrong', propose: (t, k) => ngram.propose(t, k).map((x, i) => (i === 0 ? (x + 1) % vocab : x)) };
}

interface Side {
  decodeTokS: number;
  tokens: number;
  drafted: number;
  accepted: number;
}

/** Decode tok/s of one request: tokens after the first over the time since the first. */
async function runOne(model: NativeModel, mode: SpeculativeMode, w: Workload, gen: number): Promise<Side> {
  const engine = new Engine({
    model,
    newTextStream: () => ({ push: () => '.', flush: () => '' }),
    stopTokenIds: [],
    enablePrefixCache: false,
    stepTimeoutMs: 600_000,
    speculative: mode,
    ...(w.source !== undefined ? { draftSource: w.source } : {}),
  });
  const params = resolveSamplingParams({ seed: 7, ...w.sampling, maxTokens: gen }, { maxTokens: gen });
  const h = engine.submit({ promptIds: w.prompt, params });
  let first = 0;
  let n = 0;
  for await (const e of h.events) {
    if (e.type !== 'delta') continue;
    if (n === 0) first = performance.now();
    n++;
  }
  const s = engine.stats().speculative;
  await engine.shutdown(0);
  // Several tokens may arrive in one step with drafts: the clock runs from the first delta to the last.
  const ms = performance.now() - first;
  return { decodeTokS: ((n - 1) / ms) * 1000, tokens: n, drafted: s.drafted, accepted: s.accepted };
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      rounds: { type: 'string' },
      gen: { type: 'string' },
      doc: { type: 'string' },
      threads: { type: 'string' },
      precision: { type: 'string' },
      device: { type: 'string' },
      only: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const rounds = intOption(values.rounds, 'rounds', 3);
  const gen = intOption(values.gen, 'gen', 128);
  const docLen = intOption(values.doc, 'doc', 64);
  const threads = intOption(values.threads, 'threads', 2);
  const precision = precisionOption(values.precision);
  const ckpt = ensureRandomCheckpoint();
  const device = values.device ?? 'cpu';
  if (device !== 'cpu' && device !== 'cuda') throw new Error(`--device must be cpu or cuda, got ${device}`);
  const native = loadNative({ device });
  const model = native.addon.loadModel(ckpt.dir, { threads, precision, kvCacheBytes: 256 << 20, device });
  const vocab = model.info().vocabSize;
  const doc = Array.from({ length: docLen }, (_, i) => hash32(i + 1) % vocab);
  const distinct = Array.from({ length: 3 * docLen }, (_, i) => hash32(i + 1_000_003) % vocab);
  const workloads: Workload[] = [
    { name: 'extraction', prompt: [...doc, ...doc, ...doc], sampling: { temperature: 0 } },
    { name: 'no-match', prompt: distinct, sampling: { temperature: 1, topP: 1 } },
    { name: 'all-wrong', prompt: [...doc, ...doc, ...doc], sampling: { temperature: 0 }, source: alwaysWrong(vocab) },
  ];
  const only = values.only?.split(',');
  const unknown = only?.filter((n) => !workloads.some((w) => w.name === n)) ?? [];
  if (unknown.length > 0) throw new Error(`--only: unknown workload ${unknown.join(', ')} (extraction, no-match, all-wrong)`);
  const load0 = loadavg()[0]!;
  await runOne(model, 'off', workloads[0]!, 8); // warm-up: page in the weights
  const out: Record<string, { off: Side[]; ngram: Side[]; ratios: number[] }> = {};
  for (const w of workloads.filter((x) => only === undefined || only.includes(x.name))) {
    const r = (out[w.name] = { off: [] as Side[], ngram: [] as Side[], ratios: [] as number[] });
    for (let i = 0; i < rounds; i++) {
      // Alternating order, so a drifting load on a shared machine does not favour one side.
      const order: SpeculativeMode[] = i % 2 === 0 ? ['off', 'ngram'] : ['ngram', 'off'];
      const got: Partial<Record<SpeculativeMode, Side>> = {};
      for (const mode of order) got[mode] = await runOne(model, mode, w, gen);
      r.off.push(got.off!);
      r.ngram.push(got.ngram!);
      r.ratios.push(got.ngram!.decodeTokS / got.off!.decodeTokS);
      if (!values.json) {
        const s = got.ngram!;
        process.stderr.write(
          `${w.name.padEnd(11)} round ${i + 1}: off ${got.off!.decodeTokS.toFixed(1)} tok/s  ngram ${s.decodeTokS.toFixed(1)} tok/s  ratio ${r.ratios.at(-1)!.toFixed(3)}  ` +
            `drafted ${s.drafted} accepted ${s.accepted} (${s.drafted > 0 ? ((100 * s.accepted) / s.drafted).toFixed(0) : '-'}%)\n`,
        );
      }
    }
  }
  const summary = Object.fromEntries(
    Object.entries(out).map(([k, v]) => [k, { medianRatio: median(v.ratios), minRatio: Math.min(...v.ratios), maxRatio: Math.max(...v.ratios), ...v }]),
  );
  if (!values.json) {
    for (const [k, v] of Object.entries(summary)) process.stderr.write(`${k}: median ratio ${v.medianRatio.toFixed(3)} (min ${v.minRatio.toFixed(3)}, max ${v.maxRatio.toFixed(3)}) over ${rounds} rounds\n`);
  }
  process.stdout.write(
    `${JSON.stringify({ date: new Date().toISOString(), cpu: cpus()[0]?.model ?? 'unknown', load: { start: load0, end: loadavg()[0]! }, checkpoint: ckpt.dir, device: model.info().deviceName, threads, precision, gen, docLen, workloads: summary }, null, values.json ? 0 : 2)}\n`,
  );
  model.close();
  return 0;
}
