#!/usr/bin/env node
// Correctness harness for the CUDA backend, runnable with a bare `node` binary (imports only node:
// builtins; the GPU machine has no node_modules). It drives NativeModel.step() with its own block
// tables, the way test/helpers/runner.ts does, and checks on the chosen device:
//   parity   every test/fixtures/models/* fixture against transformers, exactly as test/model/parity.test.ts
//            (exact and fast precision, one-step prefill and chunks of 7; exact: max |diff| <= 1e-3 *
//            max(1, max|logit|) and greedy identical; fast: <= 0.2 * max(1, max|logit|), greedy reported),
//            and the text lane of the VLM fixtures (Qwen3-VL-MoE, Gemma 4 dense and MoE) as test/helpers/vlm.ts
//            expectTextCase (exact: 1e-4 for f32, 1e-3 for quantized; 16 greedy tokens identical);
//   batch    16 distinct prompts alone vs in one staggered batch (rows joining late, rows finishing
//            early, a long prompt prefilled in chunks next to decodes; alone with the same chunking):
//            greedy tokens identical, the logits row of each sequence's last sampled token bitwise
//            identical; chunked vs one-step prefill tokens identical on fixtures (reported on --model);
//   agree    CPU vs the device on every fixture: exact greedy identical (first divergence reported),
//            logits max rel diff <= 1e-3 (exact) / 0.2 (fast, greedy agreement reported);
//   errors   bad rows (token outside the vocabulary, too few blocks) fail alone while good rows run;
//            on CUDA, a KV budget larger than device memory is a clear load error;
//   pool     the pooled hidden states (wantHidden rows) of test/fixtures/embeddings/reference.json's models against
//            transformers' last-token pooling (exact: cosine > 0.9999 and max |diff| < 2e-4 after L2 normalisation;
//            fast: cosine > 0.999), each text alone vs all in one step (bitwise), and next to a sampling row;
//   device   (CUDA only) systemInfo().cuda lists a device; loaded models report device 'cuda'.
//   ahead    (CUDA only) the step the GPU runs ahead (the next token of every row, before the host has it) never
//            changes a result: a scripted run (greedy and seeded draws, a row joining and one ending, a fed token
//            that is not the sampled one, a draw that changes mid-run, block boundaries) gives the same tokens
//            with RAPID_CUDA_AHEAD=0 as by default, exact and fast.
//   bias     logit bias on the device's sampling paths: +100 forces a token (greedy and seeded draws, with and
//            without logprobs), -100 on the greedy token picks the runner-up of the same device's logits, and
//            unbiased rows batched with biased ones keep their greedy tokens.
//   kvdtype  per --kv-cache-dtype (f32 f16 bf16 int8) on the dense fixtures, exact precision, chunks of 7: logits
//            vs transformers within that dtype's tolerance (KV_TOL, test/native/kv-cache.test.ts), the device vs
//            the CPU with the same dtype (same tolerance), greedy agreement with both reported (on CUDA each dtype
//            also at fast precision, within FAST_TOL); the default dtype
//            (DEFAULT_KV: fast precision). CUDA stores every dtype with the CPU pool's bytes: that the write kernels
//            store the CPU's bytes and attention reads them as the CPU does is build/cuda/tests/cuda_kv_test's part.
//   sampling seeded draws over a grid of temperature, top-k, top-p, min-p (and penalties, a logit bias) on one
//            fixture: the device's 8 tokens per setting against the CPU sampler's (both sample the fixed-point
//            rules of sampling/fixed_weight.h; logits differ by rounding, so agreement is reported and at least
//            90% of settings must match whole), every setting alone == all in one batch on the device (bitwise),
//            and a repeat == the first run.
//   rope     (CUDA only) the q/k/v launch with RoPE in its epilogue stores what rope_kv_write does: a staggered
//            batch's tokens and final logits are bitwise the same with RAPID_CUDA_ROPE_EPILOGUE=0 as by default.
//   spec     speculative verification (draft rows, docs/speculative.md): per fixture and precision, a decode row's
//            logits equal the first position of a multi-token row bitwise; greedy decoding with draft rows (drafts
//            taken from the plain run, full and wrong ones) emits the plain run's tokens; seeded draws (temperature
//            0.8, top-p 0.95) with drafts emit the tokens a plain run draws.
// Usage: node test/cuda/cuda-checks.mjs --addon PATH/rapid_native.node [--cpu-addon PATH] [--json OUT]
//          [--device cuda|cpu] [--model DIR]... [--only parity,batch,agree,errors,device,ahead,rope,bias,kvdtype,spec,sampling]
//          [--filter REGEX] [--kv-bytes N] [--strict]
// A model the device backend rejects as unsupported is a SKIP line (a FAIL with --strict).
// Prints one PASS/FAIL/SKIP line per check, then 'N passed, M failed, K skipped'; exits 1 on any failure.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const MODEL_ROOT = resolve(HERE, '..', 'fixtures', 'models');
const VLM_ROOT = resolve(HERE, '..', 'fixtures', 'vlm');

const EXACT_TOL = 1e-3; // parity.test.ts
const FAST_TOL = 0.2; // parity.test.ts: int8 activations on tiny random models
const VLM_F32_TOL = 1e-4; // vlm.test.ts / mistral3.test.ts
const FIXTURE_KV = 32 << 20;
// max |logit diff| / max(1, max|logit|) per KV dtype at exact precision (test/native/kv-cache.test.ts).
const KV_TOL = { f32: 1e-3, f16: 3e-3, bf16: 2e-2, int8: 4e-2 };
// What each device stores when --kv-cache-dtype is not given, at fast precision (kv/kv_dtype.cpp default_kv_dtype).
const DEFAULT_KV = { cpu: 'f16', cuda: 'bf16' };
const GREEDY = Object.freeze({
  temperature: 0, topP: 1, topK: 0, minP: 0, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0,
  seed: 0, counter: 0, logprobs: -1,
});
const UNSUPPORTED = /not supported|unsupported|does not support|supports only/i; // a model family the device backend lacks, not a wrong binary

// ---------------------------------------------------------------- options

function parseArgs(argv) {
  const o = { addon: '', cpuAddon: '', json: '', device: 'cuda', models: [], only: null, filter: null, kvBytes: 512 << 20, strict: false, emit: '' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--addon') o.addon = resolve(val());
    else if (a === '--cpu-addon') o.cpuAddon = resolve(val());
    else if (a === '--json') o.json = resolve(val());
    else if (a === '--device') o.device = val();
    else if (a === '--model') o.models.push(resolve(val()));
    else if (a === '--only') o.only = new Set(val().split(','));
    else if (a === '--filter') o.filter = new RegExp(val());
    else if (a === '--kv-bytes') o.kvBytes = Number(val());
    else if (a === '--strict') o.strict = true;
    else if (a === '--emit-agree') o.emit = resolve(val()); // internal: child process of --cpu-addon
    else if (a === '--help' || a === '-h') {
      console.log('usage: node test/cuda/cuda-checks.mjs --addon PATH [--cpu-addon PATH] [--json OUT] [--device cuda|cpu] [--model DIR]... [--only parity,batch,agree,errors,device,ahead,rope,bias,kvdtype,spec,sampling] [--filter REGEX] [--kv-bytes N] [--strict]');
      process.exit(0);
    } else throw new Error(`unknown argument ${a}`);
  }
  if (!o.addon) throw new Error('--addon PATH/rapid_native.node is required');
  if (o.device !== 'cuda' && o.device !== 'cpu') throw new Error('--device must be cuda or cpu');
  if (!Number.isFinite(o.kvBytes) || o.kvBytes <= 0) throw new Error('--kv-bytes must be a positive number');
  return o;
}

function loadAddon(path) {
  if (!existsSync(path)) throw new Error(`addon not found: ${path}`);
  return createRequire(import.meta.url)(path);
}

// ---------------------------------------------------------------- fixtures

function readF32(path) {
  const buf = readFileSync(path);
  return new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
}

/** test/fixtures/models/*: { name, dir, ref, logits } with reference.json + logits.f32 (test/helpers/fixtures.ts). */
function modelFixtures(filter) {
  if (!existsSync(MODEL_ROOT)) return [];
  return readdirSync(MODEL_ROOT)
    .filter((d) => existsSync(join(MODEL_ROOT, d, 'reference.json')) && existsSync(join(MODEL_ROOT, d, 'logits.f32')))
    .filter((d) => !filter || filter.test(d))
    .sort()
    .map((name) => {
      const dir = join(MODEL_ROOT, name);
      return { name, dir, ref: JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')), logits: readF32(join(dir, 'logits.f32')) };
    });
}

/** Text-only cases of the VLM fixtures (Qwen3-VL-MoE's and Gemma 4 MoE's experts run on CUDA too). */
function vlmTextFixtures(filter) {
  if (!existsSync(VLM_ROOT)) return { fixtures: [], skipped: [] };
  const fixtures = [];
  const skipped = [];
  for (const name of readdirSync(VLM_ROOT).sort()) {
    const dir = join(VLM_ROOT, name);
    if (!existsSync(join(dir, 'reference.json')) || (filter && !filter.test(`vlm/${name}`))) continue;
    const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8'));
    // Logits of the last n_last rows, or (Gemma 4) of logits_positions, read here as the prompt's last rows.
    const lastRows = (c) =>
      typeof c.n_last === 'number'
        ? c.n_last
        : Array.isArray(c.logits_positions) && c.logits_positions.every((p, i) => p === c.n_tokens - c.logits_positions.length + i)
          ? c.logits_positions.length
          : null;
    const found = ref.cases.find((c) => c.images.length === 0 && lastRows(c) !== null);
    const text = found && { ...found, n_last: lastRows(found) };
    if (!text) {
      skipped.push(`${name} (no text-only case with n_last logits)`);
      continue;
    }
    fixtures.push({ name: `vlm/${name}`, dir, isF32: name.endsWith('-f32'), text, refLogits: readF32(join(dir, text.logits)) });
  }
  return { fixtures, skipped };
}

// ---------------------------------------------------------------- the miniature scheduler

/** Hands out KV blocks; every sequence of one run gets its own, never reused within the run. */
class BlockAllocator {
  constructor(blockSize, numBlocks) {
    this.blockSize = blockSize;
    this.numBlocks = numBlocks;
    this.next = 0;
  }
  grow(table, tokens) {
    while (table.length * this.blockSize < tokens) {
      if (this.next >= this.numBlocks) throw new Error(`harness ran out of KV blocks (${this.numBlocks}); raise --kv-bytes`);
      table.push(this.next++);
    }
  }
}

/**
 * Greedy-decodes specs together, as test/helpers/runner.ts + vlm.ts do: explicit positions ([3*n] axis-major
 * for mRoPE: text-only, so index + delta on every axis), per-sequence block tables, prefill in `chunk`s,
 * sequences scheduled from `startStep`. spec: { id, prompt, maxTokens, chunk?, startStep?, logitRows?,
 * lastLogits?, wantPrefillLogits?, sample? (over greedy) }. Returns Map id -> { tokens, logits (rows [vocab]), prefillLogits, lastLogits, errors }.
 */
async function runSequences(model, specs) {
  const info = model.info();
  const axes = info.mropeSections ? 3 : 1;
  const vocab = info.vocabSize;
  const blocks = new BlockAllocator(info.blockSize, info.numBlocks);
  const st = specs.map((spec) => ({ spec, ctx: 0, table: [], done: false, out: { tokens: [], logits: [], prefillLogits: null, lastLogits: null, errors: [] } }));
  for (let step = 0; st.some((s) => !s.done); step++) {
    if (step > 20_000) throw new Error('runaway harness loop');
    const rows = [];
    const byId = new Map();
    for (const s of st) {
      if (s.done || (s.spec.startStep ?? 0) > step) continue;
      const n = s.spec.prompt.length;
      const prefill = s.ctx < n;
      const toks = prefill ? s.spec.prompt.slice(s.ctx, Math.min(n, s.ctx + (s.spec.chunk ?? n))) : [s.out.tokens[s.out.tokens.length - 1]];
      // Decode feeds the last sampled token, which is not yet in KV.
      const start = prefill ? s.ctx : n + s.out.tokens.length - 1;
      blocks.grow(s.table, start + toks.length);
      const positions = new Int32Array(axes * toks.length);
      for (let a = 0; a < axes; a++) for (let i = 0; i < toks.length; i++) positions[a * toks.length + i] = start + i + (s.spec.delta ?? 0);
      const row = { requestId: s.spec.id, tokens: Int32Array.from(toks), positions, blockTable: Int32Array.from(s.table), contextLen: start };
      if (start + toks.length >= n) {
        row.sample = { ...GREEDY, ...s.spec.sample, counter: s.out.tokens.length, outputTokens: Int32Array.from(s.out.tokens) };
        const k = s.out.tokens.length;
        if (k < (s.spec.logitRows ?? 0) || (prefill && s.spec.wantPrefillLogits) || (s.spec.lastLogits && k === s.spec.maxTokens - 1)) row.wantLogits = true;
      }
      rows.push(row);
      byId.set(s.spec.id, { s, row });
    }
    if (rows.length === 0) continue;
    const res = await model.step({ rows });
    for (const r of res.rows) {
      const { s, row } = byId.get(r.requestId);
      if (r.error !== undefined) {
        s.out.errors.push(r.error);
        s.done = true;
        continue;
      }
      s.ctx = row.contextLen + row.tokens.length;
      if (row.wantLogits) {
        if (!r.logits || r.logits.length !== row.tokens.length * vocab) {
          s.out.errors.push(`wantLogits returned ${r.logits ? r.logits.length : 'no'} floats, expected ${row.tokens.length * vocab}`);
          s.done = true;
          continue;
        }
        const k = s.out.tokens.length;
        const last = r.logits.slice(r.logits.length - vocab);
        if (k < (s.spec.logitRows ?? 0)) s.out.logits.push(last);
        if (s.spec.wantPrefillLogits && row.contextLen < s.spec.prompt.length) s.out.prefillLogits = r.logits.slice();
        if (s.spec.lastLogits && k === s.spec.maxTokens - 1) s.out.lastLogits = last;
      }
      if (r.token !== undefined) {
        s.out.tokens.push(r.token);
        if (s.out.tokens.length >= s.spec.maxTokens) s.done = true;
      } else if (row.sample) {
        s.out.errors.push('sampled row returned no token');
        s.done = true;
      }
    }
  }
  return new Map(st.map((s) => [s.spec.id, s.out]));
}

// ---------------------------------------------------------------- numbers

function maxAbsDiff(a, b) {
  if (a.length !== b.length) throw new Error(`length mismatch ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= m)) m = Number.isNaN(d) ? Infinity : d; // NaN anywhere is a failure, never a pass
  }
  return m;
}
const maxAbs = (a) => a.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
function bitwiseEqual(a, b) {
  if (!a || !b || a.length !== b.length) return false;
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}
const firstDiff = (a, b) => {
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return -1;
};
const agreePrefix = (a, b) => {
  let k = 0;
  while (k < a.length && k < b.length && a[k] === b[k]) k++;
  return k;
};
const fmt = (x) => (Number.isFinite(x) ? x.toExponential(2) : String(x));

// ---------------------------------------------------------------- pooled hidden states (embeddings)

const EMBED_REF = resolve(HERE, '..', 'fixtures', 'embeddings', 'reference.json');

function unit(v) {
  let s = 0;
  for (const x of v) s += x * x;
  const n = Math.sqrt(s);
  return Array.from(v, (x) => x / n);
}

/** Hidden states of `prompts`, all prefilled in one step (wantHidden on each row); `extra` rows ride along. */
async function pooledStep(model, prompts, extra = []) {
  const bs = model.info().blockSize;
  let next = 0;
  const table = (n) => Int32Array.from({ length: Math.ceil(n / bs) }, () => next++);
  const rows = prompts.map((ids, i) => ({
    requestId: `p${i}`, tokens: Int32Array.from(ids), positions: Int32Array.from(ids, (_, j) => j), blockTable: table(ids.length), contextLen: 0, wantHidden: true,
  }));
  for (const e of extra) rows.push({ ...e, blockTable: table(e.tokens.length) });
  const res = await model.step({ rows });
  for (const r of res.rows) if (r.error) throw new Error(`${r.requestId}: ${r.error}`);
  return { hidden: prompts.map((_, i) => res.rows[i].hidden), extra: res.rows.slice(prompts.length) };
}

async function poolChecks(addon, device) {
  if (!existsSync(EMBED_REF)) return;
  const ref = JSON.parse(readFileSync(EMBED_REF, 'utf8'));
  for (const [name, m] of Object.entries(ref.models)) {
    for (const precision of ['exact', 'fast']) {
      const label = `${name} ${precision}`;
      const model = load(addon, join(MODEL_ROOT, name), { threads: 2, kvCacheBytes: FIXTURE_KV, precision, device }, 'pool', label);
      if (!model) continue;
      await guard('pool', label, async () => {
        const alone = [];
        for (const ids of m.ids) alone.push((await pooledStep(model, [ids])).hidden[0]);
        let worstCos = 1, worstDiff = 0;
        m.ids.forEach((_, i) => {
          const got = unit(alone[i]), want = m.embeddings[i];
          let d = 0, na = 0, nb = 0;
          for (let j = 0; j < got.length; j++) (d += got[j] * want[j]), (na += got[j] ** 2), (nb += want[j] ** 2);
          worstCos = Math.min(worstCos, d / Math.sqrt(na * nb));
          worstDiff = Math.max(worstDiff, maxAbsDiff(got, want));
        });
        const ok = precision === 'exact' ? worstCos > 0.9999 && worstDiff < 2e-4 : worstCos > 0.999;
        report(ok ? 'PASS' : 'FAIL', 'pool', `${label} parity`, `min cosine ${(1 - worstCos).toExponential(2)} from 1, max |diff| ${fmt(worstDiff)}`);
        const together = (await pooledStep(model, m.ids)).hidden;
        const same = m.ids.every((_, i) => bitwiseEqual(together[i], alone[i]));
        report(same ? 'PASS' : 'FAIL', 'pool', `${label} batch`, same ? 'all texts in one step: bitwise as each alone' : 'a text pooled in a batch differs from alone');
        if (model.info().embeddingOnly) return;
        const a = m.ids[0];
        const sampler = { requestId: 's', tokens: Int32Array.from(a), positions: Int32Array.from(a, (_, j) => j), contextLen: 0, sample: GREEDY };
        const soloTok = (await pooledStep(model, [], [sampler])).extra[0].token;
        const mixed = await pooledStep(model, [m.ids[1]], [sampler]);
        const mixOk = mixed.extra[0].token === soloTok && bitwiseEqual(mixed.hidden[0], alone[1]);
        report(mixOk ? 'PASS' : 'FAIL', 'pool', `${label} mixed`, mixOk ? 'a pooled row beside a sampling row: both as alone' : 'a pooled row and a sampling row disturb each other');
      });
      model.close();
    }
  }
}

// ---------------------------------------------------------------- reporting

const results = [];
let strict = false;
function report(status, check, name, detail) {
  const st = status === 'SKIP' && strict ? 'FAIL' : status;
  results.push({ status: st, check, name, detail });
  console.log(`${st} ${check} ${name}: ${detail}`);
}

/** Loads dir on device; a backend that rejects the model as unsupported is reported as SKIP (null). */
function load(addon, dir, opts, check, name) {
  try {
    return addon.loadModel(dir, opts);
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    if (opts.device === 'cuda' && UNSUPPORTED.test(msg)) report('SKIP', check, name, `device cuda rejects it: ${msg}`);
    else report('FAIL', check, name, `loadModel threw: ${msg}`);
    return null;
  }
}

/** Runs fn, turning an exception into a FAIL line (a harness exception must never pass silently). */
async function guard(check, name, fn) {
  try {
    await fn();
  } catch (e) {
    report('FAIL', check, name, `threw: ${e instanceof Error ? e.stack ?? e.message : String(e)}`);
  }
}

// ---------------------------------------------------------------- a) parity with transformers

async function parityModel(addon, device, fx) {
  for (const precision of ['exact', 'fast']) {
    for (const chunk of [undefined, 7]) {
      const name = `${fx.name} ${precision}${chunk ? ' chunks-of-7' : ' one-step'}`;
      const model = load(addon, fx.dir, { device, kvCacheBytes: FIXTURE_KV, precision }, 'parity', name);
      if (!model) continue;
      await guard('parity', name, async () => {
        try {
          const problems = [];
          let worst = 0;
          let agree = 0;
          let total = 0;
          const v = fx.ref.vocab_size;
          for (let p = 0; p < fx.ref.prompts.length; p++) {
            const pr = fx.ref.prompts[p];
            const out = (await runSequences(model, [{ id: `p${p}`, prompt: pr.ids, maxTokens: pr.greedy.length, chunk, logitRows: pr.logits_rows }])).get(`p${p}`);
            if (out.errors.length) {
              problems.push(`prompt ${p} errors: ${out.errors.join('; ')}`);
              continue;
            }
            const scale = Math.max(1, pr.max_abs_logit);
            const tol = (precision === 'exact' ? EXACT_TOL : FAST_TOL) * scale;
            if (out.logits.length < pr.logits_rows && out.tokens.length >= pr.logits_rows) problems.push(`prompt ${p}: ${out.logits.length} logits rows`);
            // Logit rows are only comparable while our tokens follow the reference's.
            for (let j = 0; j < out.logits.length; j++) {
              if (j > 0 && out.tokens[j - 1] !== pr.greedy[j - 1]) break;
              const ref = fx.logits.subarray(pr.logits_offset + j * v, pr.logits_offset + (j + 1) * v);
              const d = maxAbsDiff(out.logits[j], ref);
              worst = Math.max(worst, d / scale);
              if (!(d <= tol)) problems.push(`prompt ${p} row ${j}: |diff| ${fmt(d)} > ${fmt(tol)}`);
            }
            const k = agreePrefix(out.tokens, pr.greedy);
            agree += k;
            total += pr.greedy.length;
            if (precision === 'exact' && (k !== pr.greedy.length || out.tokens.length !== pr.greedy.length))
              problems.push(`prompt ${p} greedy diverges at token ${k} (got ${out.tokens[k]}, want ${pr.greedy[k]})`);
          }
          const nums = `max |diff|/max(1,|logit|) = ${fmt(worst)} (tol ${precision === 'exact' ? EXACT_TOL : FAST_TOL}), greedy ${agree}/${total}`;
          report(problems.length ? 'FAIL' : 'PASS', 'parity', name, problems.length ? `${nums}; ${problems.slice(0, 4).join('; ')}` : nums);
        } finally {
          model.close();
        }
      });
    }
  }
}

/** The VLM text lane: test/helpers/vlm.ts expectTextCase (exact precision, one-step prefill). */
async function parityVlmText(addon, device, fx) {
  const name = `${fx.name} text exact one-step`;
  const model = load(addon, fx.dir, { device, kvCacheBytes: FIXTURE_KV, precision: 'exact' }, 'parity', name);
  if (!model) return;
  await guard('parity', name, async () => {
    try {
      const c = fx.text;
      const spec = { id: 't', prompt: c.input_ids, maxTokens: c.greedy.length, wantPrefillLogits: true, delta: c.rope_delta ?? 0 };
      checkTextPositions(c);
      const out = (await runSequences(model, [spec])).get('t');
      if (out.errors.length) return report('FAIL', 'parity', name, `errors: ${out.errors.join('; ')}`);
      const ref = fx.refLogits;
      const got = out.prefillLogits.subarray(out.prefillLogits.length - ref.length);
      const scale = Math.max(1, maxAbs(ref));
      const tol = fx.isF32 ? VLM_F32_TOL : EXACT_TOL;
      const rel = maxAbsDiff(got, ref) / scale;
      const k = agreePrefix(out.tokens, c.greedy);
      const ok = rel <= tol && k === c.greedy.length && out.tokens.length === c.greedy.length;
      report(ok ? 'PASS' : 'FAIL', 'parity', name, `last ${c.n_last} rows max |diff|/max(1,|logit|) = ${fmt(rel)} (tol ${tol}), greedy ${k}/${c.greedy.length}`);
    } finally {
      model.close();
    }
  });
}

/** Text-only mRoPE positions are index + delta on every axis; the runner relies on that. */
function checkTextPositions(c) {
  if (!c.position_ids) return;
  for (const axis of c.position_ids)
    axis.forEach((p, i) => {
      if (p !== i + (c.rope_delta ?? 0)) throw new Error(`text case position_ids[.][${i}] = ${p}, not index + delta`);
    });
}

// ---------------------------------------------------------------- b) batch invariance

/** Seeded PRNG (mulberry32, as src/bench/sweep/rng.ts; repeated here because this script runs on a GPU
 * machine with Node alone, importing nothing but node: builtins): the prompts are the same everywhere. */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * 16 distinct prompts of different lengths and their staggered schedule in the batch: rows 0-7 start at
 * step 0, the rest join every 2 steps; rows 1 and 6 finish early; row 15 is a 300-token prompt prefilled
 * in chunks of 32 from step 3 (its chunks share steps with other rows' decodes); row 10 in chunks of 7.
 * `solo` runs each with the same chunking (only the neighbours differ), `whole` the chunked rows in one step.
 */
function batchSpecs(vocab, contextLength, seedPrompts) {
  const lengths = [1, 2, 3, 5, 8, 13, 16, 17, 24, 31, 33, 47, 64, 96, 130, 300];
  const r = rng(0xc0da);
  const solo = lengths.map((len, i) => {
    // Start from a real fixture prompt where there is one (chat-like tokens), continue with seeded ids.
    const base = seedPrompts[i] ?? [];
    const prompt = Array.from({ length: Math.min(len, contextLength - 40) }, (_, k) => (k < base.length ? base[k] : Math.floor(r() * vocab)));
    return { id: `s${i}`, prompt, maxTokens: i === 1 ? 2 : i === 6 ? 5 : 24, lastLogits: true, chunk: i === 15 ? 32 : i === 10 ? 7 : undefined };
  });
  const staggered = solo.map((s, i) => ({ ...s, startStep: i === 15 ? 3 : i < 8 ? 0 : 2 * (i - 7) }));
  const whole = solo.filter((s) => s.chunk !== undefined).map((s) => ({ ...s, chunk: undefined }));
  return { solo, staggered, whole };
}

/**
 * Two lines: greedy tokens alone == in the batch, and the last sampled row's logits bitwise. Chunked == one-step
 * prefill tokens is required on the fixtures (as batch.test.ts does) and only reported on --model dirs: random
 * weights give near-tied logits that the last bits of a different prefill split can flip.
 */
async function batchInvariance(addon, device, label, dir, precision, kvCacheBytes, seedPrompts, requireChunkEqual) {
  const name = `${label} ${precision}`;
  const model = load(addon, dir, { device, kvCacheBytes, precision }, 'batch', name);
  if (!model) return;
  await guard('batch', name, async () => {
    try {
      const info = model.info();
      const { solo, staggered, whole } = batchSpecs(info.vocabSize, info.contextLength, seedPrompts);
      const alone = new Map();
      for (const s of solo) alone.set(s.id, (await runSequences(model, [s])).get(s.id));
      const together = await runSequences(model, staggered);
      const tokenProblems = [];
      const logitProblems = [];
      let same = 0;
      let bitwise = 0;
      let worst = 0;
      for (const s of solo) {
        const a = alone.get(s.id);
        const b = together.get(s.id);
        if (a.errors.length || b.errors.length) {
          tokenProblems.push(`${s.id} errors: ${[...a.errors, ...b.errors].join('; ')}`);
          continue;
        }
        const k = firstDiff(a.tokens, b.tokens);
        if (k >= 0) tokenProblems.push(`${s.id} (len ${s.prompt.length}) tokens differ at ${k}: alone ${a.tokens[k]} vs batch ${b.tokens[k]}`);
        else same++;
        if (bitwiseEqual(a.lastLogits, b.lastLogits)) bitwise++;
        else if (a.lastLogits && b.lastLogits) {
          const d = maxAbsDiff(a.lastLogits, b.lastLogits);
          worst = Math.max(worst, d);
          logitProblems.push(`${s.id} (len ${s.prompt.length}${s.chunk ? `, chunks of ${s.chunk}` : ''}) max |diff| ${fmt(d)}`);
        } else logitProblems.push(`${s.id} final logits row missing`);
      }
      // Chunked prefill vs one-step prefill: greedy tokens identical (logits may differ in the last bits).
      let chunkWorst = 0;
      const chunkNotes = [];
      for (const w of whole) {
        const a = (await runSequences(model, [w])).get(w.id);
        const b = alone.get(w.id);
        const k = firstDiff(a.tokens, b.tokens);
        if (a.errors.length) tokenProblems.push(`${w.id} one-step errors: ${a.errors.join('; ')}`);
        else if (k >= 0) (requireChunkEqual ? tokenProblems : chunkNotes).push(`${w.id} chunked vs one-step prefill tokens differ at ${k}: ${b.tokens[k]} vs ${a.tokens[k]}`);
        if (a.lastLogits && b.lastLogits) chunkWorst = Math.max(chunkWorst, maxAbsDiff(a.lastLogits, b.lastLogits));
      }
      const tokNums = `${solo.length} prompts (len 1..${solo[solo.length - 1].prompt.length}), alone == batch ${same}/${solo.length}, chunked == one-step prefill ${whole.length - [...tokenProblems, ...chunkNotes].filter((p) => /chunked|one-step/.test(p)).length}/${whole.length}${requireChunkEqual ? '' : ' (reported, not required)'} (final logits max |diff| ${fmt(chunkWorst)})${chunkNotes.length ? `; ${chunkNotes.join('; ')}` : ''}`;
      report(tokenProblems.length ? 'FAIL' : 'PASS', 'batch', `${name} tokens`, tokenProblems.length ? `${tokNums}; ${tokenProblems.slice(0, 4).join('; ')}` : tokNums);
      const logNums = `last sampled row's logits alone vs batch bitwise ${bitwise}/${solo.length}${worst ? ` (max |diff| ${fmt(worst)})` : ''}`;
      report(logitProblems.length ? 'FAIL' : 'PASS', 'batch', `${name} logits-bitwise`, logitProblems.length ? `${logNums}; ${logitProblems.slice(0, 4).join('; ')}` : logNums);
    } finally {
      model.close();
    }
  });
}

// ---------------------------------------------------------------- c) CPU vs device agreement

/** Greedy tokens and logits rows of every agree case on one addon + device: key -> { tokens[][], logits[][] }. */
async function agreeRuns(addon, device, models, vlms) {
  const out = {};
  const cases = [
    ...models.map((fx) => ({ key: fx.name, dir: fx.dir, prompts: fx.ref.prompts.map((p) => ({ ids: p.ids, n: p.greedy.length, rows: p.logits_rows, delta: 0 })) })),
    ...vlms.map((fx) => ({ key: fx.name, dir: fx.dir, prompts: [{ ids: fx.text.input_ids, n: fx.text.greedy.length, rows: 4, delta: fx.text.rope_delta ?? 0 }] })),
  ];
  for (const c of cases) {
    for (const precision of ['exact', 'fast']) {
      const key = `${c.key} ${precision}`;
      let model;
      try {
        model = addon.loadModel(c.dir, { device, kvCacheBytes: FIXTURE_KV, precision });
      } catch (e) {
        out[key] = { error: e instanceof Error ? e.message : String(e) };
        continue;
      }
      try {
        const specs = c.prompts.map((p, i) => ({ id: `p${i}`, prompt: p.ids, maxTokens: p.n, logitRows: p.rows, delta: p.delta }));
        const res = await runSequences(model, specs);
        out[key] = { tokens: specs.map((s) => res.get(s.id).tokens), logits: specs.map((s) => res.get(s.id).logits), errors: specs.flatMap((s) => res.get(s.id).errors) };
      } finally {
        model.close();
      }
    }
  }
  return out;
}

/** The CPU side from a separate addon binary, in a child process (two copies of one addon in a process may share statics). */
function agreeRunsInChild(cpuAddon, opts) {
  const tmp = mkdtempSync(join(tmpdir(), 'rapid-cuda-checks-'));
  try {
    const file = join(tmp, 'cpu.json');
    const args = [fileURLToPath(import.meta.url), '--addon', cpuAddon, '--device', 'cpu', '--emit-agree', file];
    if (opts.filter) args.push('--filter', opts.filter.source);
    const r = spawnSync(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit'], timeout: 3_600_000 });
    if (r.status !== 0) throw new Error(`CPU child exited with ${r.status ?? r.signal}`);
    const raw = JSON.parse(readFileSync(file, 'utf8'));
    for (const v of Object.values(raw)) if (v.logits) v.logits = v.logits.map((rows) => rows.map((b64) => { const b = Buffer.from(b64, 'base64'); return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)); }));
    return raw;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

function compareAgree(cpu, dev, deviceLabel) {
  for (const key of Object.keys(dev)) {
    const name = `${key} cpu vs ${deviceLabel}`;
    const a = cpu[key];
    const b = dev[key];
    if (!a) {
      report('FAIL', 'agree', name, 'no CPU result');
      continue;
    }
    if (a.error || b.error) {
      if (b.error && UNSUPPORTED.test(b.error)) report('SKIP', 'agree', name, `device rejects it: ${b.error}`);
      else report('FAIL', 'agree', name, `load failed: cpu ${a.error ?? 'ok'}; device ${b.error ?? 'ok'}`);
      continue;
    }
    if (a.errors.length || b.errors.length) {
      report('FAIL', 'agree', name, `step errors: ${[...a.errors, ...b.errors].join('; ')}`);
      continue;
    }
    const exact = key.endsWith(' exact');
    let worst = 0;
    let agree = 0;
    let total = 0;
    const diverge = [];
    for (let p = 0; p < a.tokens.length; p++) {
      const k = agreePrefix(a.tokens[p], b.tokens[p]);
      agree += k;
      total += a.tokens[p].length;
      if (k < a.tokens[p].length || a.tokens[p].length !== b.tokens[p].length) diverge.push(`prompt ${p} at token ${k} (cpu ${a.tokens[p][k]} vs device ${b.tokens[p][k]})`);
      // Rows compare while both still follow the same tokens; scale by the CPU row's magnitude.
      for (let j = 0; j < Math.min(a.logits[p].length, b.logits[p].length); j++) {
        if (j > 0 && a.tokens[p][j - 1] !== b.tokens[p][j - 1]) break;
        worst = Math.max(worst, maxAbsDiff(a.logits[p][j], b.logits[p][j]) / Math.max(1, maxAbs(a.logits[p][j])));
      }
    }
    const tol = exact ? EXACT_TOL : FAST_TOL;
    const ok = worst <= tol && (!exact || diverge.length === 0);
    const nums = `greedy ${agree}/${total}, logits max rel diff ${fmt(worst)} (tol ${tol})${diverge.length ? `; first divergence ${diverge[0]}${exact ? '' : ' (fast: reported, not required)'}` : ''}`;
    report(ok ? 'PASS' : 'FAIL', 'agree', name, nums);
  }
}

// ---------------------------------------------------------------- d) error paths

async function errorPaths(addon, device, fx) {
  const name = `${fx.name} bad rows fail alone`;
  const model = load(addon, fx.dir, { device, kvCacheBytes: 1 << 20, precision: 'exact' }, 'errors', name);
  if (!model) return;
  await guard('errors', name, async () => {
    try {
      const pr = fx.ref.prompts[0];
      const ids = pr.ids;
      const bs = model.info().blockSize;
      const need = Math.ceil(ids.length / bs);
      let next = 0;
      const table = (n) => Int32Array.from({ length: n }, () => next++);
      const row = (requestId, over) => ({ requestId, tokens: Int32Array.from(ids), positions: Int32Array.from(ids, (_, i) => i), blockTable: table(need), contextLen: 0, sample: { ...GREEDY }, ...over });
      const res = await model.step({
        rows: [
          row('ok1'),
          row('vocab', { tokens: Int32Array.from([1, 99999]), positions: Int32Array.from([0, 1]), blockTable: table(1) }),
          row('short', { blockTable: table(need - 1) }),
          row('ok2'),
        ],
      });
      const by = new Map(res.rows.map((r) => [r.requestId, r]));
      const problems = [];
      const expectErr = (id, re) => {
        const e = by.get(id)?.error;
        if (e === undefined || !re.test(e)) problems.push(`${id}: error ${JSON.stringify(e)} does not match ${re}`);
      };
      expectErr('vocab', /token id 99999 is outside the vocabulary/);
      expectErr('short', new RegExp(`blockTable has ${need - 1} blocks`));
      for (const id of ['ok1', 'ok2']) {
        const r = by.get(id);
        if (!r || r.error !== undefined || r.token !== pr.greedy[0]) problems.push(`${id}: ${r?.error ?? `token ${r?.token}, want ${pr.greedy[0]}`}`);
      }
      // The pool is still usable after the failed rows: the next step decodes normally.
      const again = await model.step({ rows: [row('after')] });
      if (again.rows[0]?.token !== pr.greedy[0]) problems.push(`step after the bad rows: ${again.rows[0]?.error ?? again.rows[0]?.token}`);
      report(problems.length ? 'FAIL' : 'PASS', 'errors', name, problems.length ? problems.join('; ') : `vocab: "${by.get('vocab').error}"; short: "${by.get('short').error}"; good rows sampled ${pr.greedy[0]}`);
    } finally {
      model.close();
    }
  });
}

// ---------------------------------------------------------------- logit bias

async function biasChecks(addon, device, fx) {
  const name = `${fx.name} logit bias`;
  const model = load(addon, fx.dir, { device, kvCacheBytes: FIXTURE_KV, precision: 'exact' }, 'bias', name);
  if (!model) return;
  await guard('bias', name, async () => {
    try {
      const [a, b] = fx.ref.prompts;
      const vocab = model.info().vocabSize;
      const forced = [5, 6, 7].find((t) => !a.greedy.slice(0, 8).includes(t));
      const bias = (entries) => ({ tokens: Int32Array.from(entries, (e) => e[0]), values: Float32Array.from(entries, (e) => e[1]) });
      const logits = (await runSequences(model, [{ id: 'l', prompt: a.ids, maxTokens: 1, logitRows: 1 }])).get('l').logits[0];
      let second = -1;
      for (let i = 0; i < vocab; i++) if (i !== a.greedy[0] && (second < 0 || logits[i] > logits[second])) second = i;
      const up = bias([[forced, 100]]);
      const out = await runSequences(model, [
        { id: 'greedy+', prompt: a.ids, maxTokens: 8, sample: { logitBias: up } },
        { id: 'drawn+', prompt: a.ids, maxTokens: 8, sample: { temperature: 1, topP: 0.9, seed: 3, logitBias: up } },
        { id: 'logprobs+', prompt: a.ids, maxTokens: 4, sample: { logprobs: 2, logitBias: up } },
        { id: 'banned', prompt: a.ids, maxTokens: 1, sample: { logitBias: bias([[a.greedy[0], -100]]) } },
        { id: 'plainA', prompt: a.ids, maxTokens: 8 },
        { id: 'plainB', prompt: b.ids, maxTokens: 8, startStep: 1 },
      ]);
      const problems = [];
      for (const [id, o] of out) if (o.errors.length) problems.push(`${id}: ${o.errors.join('; ')}`);
      for (const id of ['greedy+', 'drawn+', 'logprobs+']) {
        const t = out.get(id).tokens;
        if (!t.length || t.some((x) => x !== forced)) problems.push(`${id}: tokens ${t.join(',')}, want all ${forced}`);
      }
      if (out.get('banned').tokens[0] !== second) problems.push(`banned: token ${out.get('banned').tokens[0]}, want the runner-up ${second}`);
      for (const [id, p] of [['plainA', a], ['plainB', b]]) {
        const t = out.get(id).tokens;
        if (t.join(',') !== p.greedy.slice(0, t.length).join(',')) problems.push(`${id}: tokens ${t.join(',')} differ from the greedy reference`);
      }
      report(problems.length ? 'FAIL' : 'PASS', 'bias', name, problems.length ? problems.slice(0, 4).join('; ') : `+100 forced ${forced} (greedy, drawn, logprobs rows); -100 gave the runner-up ${second}; unbiased neighbours greedy`);
    } finally {
      model.close();
    }
  });
}

// ---------------------------------------------------------------- sampling grid

/** The sampled settings: temperature x top-k x top-p x min-p, plus penalties and a logit bias. */
function samplingGrid() {
  const grid = [];
  let seed = 1;
  for (const temperature of [0.6, 1.0, 1.5])
    for (const topK of [0, 7, 64])
      for (const topP of [1, 0.95, 0.5])
        for (const minP of [0, 0.1]) grid.push({ temperature, topK, topP, minP, seed: seed++ });
  grid.push({ temperature: 0.8, topP: 0.95, repetitionPenalty: 1.3, presencePenalty: 0.5, frequencyPenalty: 0.2, seed: seed++ });
  grid.push({ temperature: 0.8, topK: 40, topP: 0.9, logitBias: { tokens: Int32Array.of(3, 11), values: Float32Array.of(2, -3) }, seed: seed++ });
  return grid;
}

async function samplingChecks(addon, device, fx) {
  const name = `${fx.name} sampling grid`;
  const grid = samplingGrid();
  const [a, b] = fx.ref.prompts;
  const specs = grid.map((sample, i) => ({ id: `s${i}`, prompt: (i % 2 ? b : a).ids, maxTokens: 8, sample, startStep: i % 3 }));
  const run = async (dev, batched) => {
    const model = load(addon, fx.dir, { device: dev, kvCacheBytes: FIXTURE_KV, precision: 'exact' }, 'sampling', `${name} (${dev})`);
    if (!model) return null;
    try {
      if (batched) return await runSequences(model, specs);
      const out = new Map();
      for (const spec of specs) out.set(spec.id, (await runSequences(model, [{ ...spec, startStep: 0 }])).get(spec.id));
      return out;
    } finally {
      model.close();
    }
  };
  await guard('sampling', name, async () => {
    const together = await run(device, true);
    const alone = await run(device, false);
    const again = await run(device, true);
    const cpu = device === 'cpu' ? together : await run('cpu', true);
    if (!together || !alone || !again || !cpu) return;
    const problems = [];
    let agree = 0;
    const differ = [];
    for (const spec of specs) {
      const t = together.get(spec.id);
      if (t.errors.length) problems.push(`${spec.id}: ${t.errors.join('; ')}`);
      const tt = t.tokens.join(',');
      if (alone.get(spec.id).tokens.join(',') !== tt) problems.push(`${spec.id} ${JSON.stringify(spec.sample)}: alone ${alone.get(spec.id).tokens.join(',')} != batched ${tt}`);
      if (again.get(spec.id).tokens.join(',') !== tt) problems.push(`${spec.id}: repeat ${again.get(spec.id).tokens.join(',')} != first ${tt}`);
      if (cpu.get(spec.id).tokens.join(',') === tt) agree++;
      else differ.push(`${spec.id} (T ${spec.sample.temperature} k ${spec.sample.topK ?? 0} p ${spec.sample.topP ?? 1} min-p ${spec.sample.minP ?? 0}): cpu ${cpu.get(spec.id).tokens.join(',')} vs ${device} ${tt}`);
    }
    if (agree < 0.9 * specs.length) problems.push(`only ${agree}/${specs.length} settings give the CPU's tokens; first: ${differ[0]}`);
    const detail = `${specs.length} settings x 8 tokens: cpu == ${device} in ${agree}/${specs.length}${differ.length ? ` (first difference ${differ[0]})` : ''}; alone == batched, repeat == first`;
    report(problems.length ? 'FAIL' : 'PASS', 'sampling', name, problems.length ? problems.slice(0, 4).join('; ') : detail);
  });
}

function kvTooLarge(addon, fx) {
  const name = `${fx.name} KV budget beyond device memory`;
  const devs = addon.systemInfo().cuda?.devices ?? [];
  const total = devs.reduce((m, d) => Math.max(m, d.totalBytes), 0);
  const budget = total > 0 ? total * 4 : 2 ** 44;
  let model;
  try {
    model = addon.loadModel(fx.dir, { device: 'cuda', kvCacheBytes: budget, precision: 'exact' });
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    const clear = /kv|memory|bytes|out of/i.test(msg) && msg.length < 2000;
    return report(clear ? 'PASS' : 'FAIL', 'errors', name, `kvCacheBytes ${budget} -> "${msg}"`);
  }
  const info = model.info();
  model.close();
  report('FAIL', 'errors', name, `kvCacheBytes ${budget} loaded (kvBytes ${info.kvBytes}, ${info.numBlocks} blocks) instead of failing clearly`);
}

// ---------------------------------------------------------------- KV cache dtypes

async function kvDtypeChecks(addon, device, fx) {
  const base = { device, kvCacheBytes: FIXTURE_KV };
  await guard('kvdtype', `${fx.name} default`, async () => {
    const m = addon.loadModel(fx.dir, base);
    const got = m.info().kvCacheDtype;
    m.close();
    const want = DEFAULT_KV[device];
    report(got === want ? 'PASS' : 'FAIL', 'kvdtype', `${fx.name} default`, `fast precision on ${device} stores ${got} (want ${want})`);
  });
  // Exact precision isolates the KV type's error; on CUDA each dtype also runs fast (the path users take: the RoPE
  // epilogue writes 16-bit pools, int8 takes rope_kv_write), held to FAST_TOL like parity's fast runs.
  const runs = Object.keys(KV_TOL).flatMap((dtype) => [
    { dtype, precision: 'exact', tol: KV_TOL[dtype] },
    ...(device === 'cuda' ? [{ dtype, precision: 'fast', tol: FAST_TOL }] : []),
  ]);
  for (const { dtype, precision, tol } of runs) {
    const name = `${fx.name} kv ${dtype}${precision === 'fast' ? ' fast' : ''}`;
    const opts = { ...base, precision, kvCacheDtype: dtype };
    const model = load(addon, fx.dir, opts, 'kvdtype', name);
    if (!model) continue;
    const cpu = device === 'cpu' ? null : addon.loadModel(fx.dir, { ...opts, device: 'cpu' });
    await guard('kvdtype', name, async () => {
      try {
        const problems = [];
        let worst = 0;
        let worstCpu = 0;
        let agree = 0;
        let agreeCpu = 0;
        let total = 0;
        const v = fx.ref.vocab_size;
        if (model.info().kvCacheDtype !== dtype) problems.push(`info says ${model.info().kvCacheDtype}`);
        for (let p = 0; p < fx.ref.prompts.length; p++) {
          const pr = fx.ref.prompts[p];
          const spec = { id: `p${p}`, prompt: pr.ids, maxTokens: pr.greedy.length, chunk: 7, logitRows: pr.logits_rows };
          const out = (await runSequences(model, [spec])).get(spec.id);
          const ref = cpu ? (await runSequences(cpu, [spec])).get(spec.id) : null;
          if (out.errors.length || ref?.errors.length) {
            problems.push(`prompt ${p} errors: ${[...out.errors, ...(ref?.errors ?? [])].join('; ')}`);
            continue;
          }
          const scale = Math.max(1, pr.max_abs_logit);
          for (let j = 0; j < out.logits.length; j++) {
            if (j > 0 && out.tokens[j - 1] !== pr.greedy[j - 1]) break;
            const d = maxAbsDiff(out.logits[j], fx.logits.subarray(pr.logits_offset + j * v, pr.logits_offset + (j + 1) * v)) / scale;
            worst = Math.max(worst, d);
            if (!(d <= tol)) problems.push(`prompt ${p} row ${j} vs transformers: ${fmt(d)} > ${tol}`);
          }
          if (ref) {
            for (let j = 0; j < Math.min(out.logits.length, ref.logits.length); j++) {
              if (j > 0 && out.tokens[j - 1] !== ref.tokens[j - 1]) break;
              const d = maxAbsDiff(out.logits[j], ref.logits[j]) / scale;
              worstCpu = Math.max(worstCpu, d);
              if (!(d <= tol)) problems.push(`prompt ${p} row ${j} vs the CPU: ${fmt(d)} > ${tol}`);
            }
            agreeCpu += agreePrefix(out.tokens, ref.tokens);
          }
          agree += agreePrefix(out.tokens, pr.greedy);
          total += pr.greedy.length;
        }
        const nums = `vs transformers ${fmt(worst)} (tol ${tol}), greedy ${agree}/${total}` + (cpu ? `; vs CPU ${fmt(worstCpu)}, greedy ${agreeCpu}/${total}` : '');
        report(problems.length ? 'FAIL' : 'PASS', 'kvdtype', name, problems.length ? `${nums}; ${problems.slice(0, 4).join('; ')}` : nums);
      } finally {
        model.close();
        cpu?.close();
      }
    });
  }
}

// ---------------------------------------------------------------- device report (CUDA only)

function deviceChecks(addon, fx) {
  const s = addon.systemInfo();
  const cuda = s.cuda;
  const devs = cuda?.devices ?? [];
  report(cuda?.compiled && devs.length > 0 ? 'PASS' : 'FAIL', 'device', 'systemInfo().cuda',
    cuda ? `compiled ${cuda.compiled}, ${devs.length} device(s): ${devs.map((d) => `${d.name} cc ${d.computeCapability} ${(d.totalBytes / 2 ** 30).toFixed(1)} GiB`).join(', ')}; driver ${cuda.driverVersion ?? '?'} runtime ${cuda.runtimeVersion ?? '?'}${cuda.error ? `; error ${cuda.error}` : ''}` : 'systemInfo() has no cuda field (ABI < 4?)');
  const name = `${fx.name} info().device`;
  const model = load(addon, fx.dir, { device: 'cuda', kvCacheBytes: 1 << 20 }, 'device', name);
  if (!model) return;
  try {
    const info = model.info();
    report(info.device === 'cuda' && typeof info.deviceName === 'string' && info.deviceName.length > 0 ? 'PASS' : 'FAIL', 'device', name, `device ${info.device}, deviceName "${info.deviceName}"${info.deviceNote ? `, note "${info.deviceNote}"` : ''}`);
  } finally {
    model.close();
  }
}

// ---------------------------------------------------------------- CUDA switches: off vs default

/**
 * `run(model)` on fx loaded on CUDA twice: with the environment switch `env`=0 (read at load) and with it unset.
 * Returns [off, default], or null after reporting the load failure or a FAIL if a run threw.
 */
async function offAndDefault(env, addon, fx, precision, kind, name, run) {
  const runs = [];
  for (const value of ['0', undefined]) {
    if (value === undefined) delete process.env[env];
    else process.env[env] = value;
    const model = load(addon, fx.dir, { device: 'cuda', kvCacheBytes: FIXTURE_KV, precision }, kind, name);
    delete process.env[env];
    if (!model) return null;
    try {
      runs.push(await run(model));
    } catch (e) {
      report('FAIL', kind, name, `threw: ${e instanceof Error ? e.stack ?? e.message : String(e)}`);
      return null;
    } finally {
      model.close();
    }
  }
  return runs;
}

// ---------------------------------------------------------------- f) the step enqueued ahead

/**
 * A scripted decode of three rows on `model` (its tokens per row): A greedy from step 0, B drawn (seeded) from step
 * 0, C joining at step 6 and ending at step 22. At step 14 A is fed a token other than the one it sampled (the step
 * ahead misses); from step 18 B draws at another temperature (same forward, other draws). Tables grow one block at a
 * time, so rows meet block boundaries (no step ahead there).
 */
async function aheadScript(model) {
  const info = model.info();
  const axes = info.mropeSections ? 3 : 1;
  const vocab = info.vocabSize;
  const blocks = new BlockAllocator(info.blockSize, info.numBlocks);
  const r = rng(0xa11ead);
  const prompt = (n) => Array.from({ length: n }, () => Math.floor(r() * vocab));
  const rows = [
    { id: 'A', prompt: prompt(5), from: 0, to: 40, draw: () => ({ ...GREEDY }) },
    { id: 'B', prompt: prompt(11), from: 0, to: 40, draw: (step) => ({ ...GREEDY, temperature: step < 18 ? 0.9 : 0.6, topP: 0.95, seed: 7 }) },
    { id: 'C', prompt: prompt(3), from: 6, to: 22, draw: () => ({ ...GREEDY, temperature: 1.1, topK: 40, seed: 99 }) },
  ].map((x) => ({ ...x, ctx: 0, table: [], out: [], errors: [] }));
  let aheadSteps = 0;
  for (let step = 0; step < 40; step++) {
    const plan = [];
    for (const x of rows) {
      if (step < x.from || step >= x.to || x.errors.length) continue;
      let toks = x.ctx === 0 ? x.prompt : [x.out[x.out.length - 1]];
      if (x.id === 'A' && step === 14) toks = [(toks[0] + 1) % vocab];
      blocks.grow(x.table, x.ctx + toks.length);
      const positions = new Int32Array(axes * toks.length);
      for (let a = 0; a < axes; a++) for (let i = 0; i < toks.length; i++) positions[a * toks.length + i] = x.ctx + i;
      const row = { requestId: x.id, tokens: Int32Array.from(toks), positions, blockTable: Int32Array.from(x.table), contextLen: x.ctx, sample: { ...x.draw(step), counter: x.out.length } };
      plan.push({ x, row });
    }
    const res = await model.step({ rows: plan.map((p) => p.row) });
    if (res.timings.ahead) aheadSteps++;
    for (const p of plan) {
      const got = res.rows.find((y) => y.requestId === p.x.id);
      p.x.ctx += p.row.tokens.length;
      if (!got || got.error !== undefined || got.token === undefined) p.x.errors.push(got?.error ?? 'no token');
      else p.x.out.push(got.token);
    }
  }
  return { rows, aheadSteps };
}

async function aheadChecks(addon, fx) {
  for (const precision of ['exact', 'fast']) {
    const name = `${fx.name} ${precision}`;
    const runs = await offAndDefault('RAPID_CUDA_AHEAD', addon, fx, precision, 'ahead', name, aheadScript);
    if (!runs) return;
    const [{ rows: off, aheadSteps: offAhead }, { rows: on, aheadSteps: onAhead }] = runs;
    const problems = [];
    // Misses: A's fed token (step 14), C joining (6) and ending (22), B's draw (18), block boundaries; the rest hit.
    if (offAhead !== 0) problems.push(`${offAhead} steps ran ahead with RAPID_CUDA_AHEAD=0`);
    if (onAhead < 20) problems.push(`only ${onAhead} of 40 steps ran ahead by default`);
    for (let i = 0; i < off.length; i++) {
      const a = off[i];
      const b = on[i];
      if (a.errors.length || b.errors.length) problems.push(`${a.id} errors: ${[...a.errors, ...b.errors].join('; ')}`);
      const k = firstDiff(a.out, b.out);
      if (k >= 0) problems.push(`${a.id} differs at token ${k}: ${a.out[k]} without the step ahead, ${b.out[k]} with it`);
    }
    const counts = off.map((x) => `${x.id} ${x.out.length}`).join(', ');
    report(problems.length ? 'FAIL' : 'PASS', 'ahead', name, problems.length ? problems.slice(0, 4).join('; ') : `tokens identical with and without the step ahead (${counts} tokens; ${onAhead} of 40 steps ran ahead)`);
  }
}

// ---------------------------------------------------------------- g) the RoPE epilogue

/**
 * The q/k/v launch with RoPE in its epilogue (fast, affine weights, no q/k norm) stores exactly what the separate
 * rope_kv_write launch stores: the staggered batch of the batch check (prefill chunks, decodes, one token and many)
 * gives bitwise the same final logits and the same tokens with RAPID_CUDA_ROPE_EPILOGUE=0 as by default.
 */
async function ropeEpilogueChecks(addon, fx) {
  const name = `${fx.name} fast`;
  const runs = await offAndDefault('RAPID_CUDA_ROPE_EPILOGUE', addon, fx, 'fast', 'rope', name, (model) => {
    const info = model.info();
    const { staggered } = batchSpecs(info.vocabSize, info.contextLength, fx.ref.prompts.map((p) => p.ids));
    return runSequences(model, staggered);
  });
  if (!runs) return;
  const [plain, fused] = runs;
  const problems = [];
  let bitwise = 0;
  for (const [id, a] of plain) {
    const b = fused.get(id);
    if (a.errors.length || b.errors.length) problems.push(`${id} errors: ${[...a.errors, ...b.errors].join('; ')}`);
    const k = firstDiff(a.tokens, b.tokens);
    if (k >= 0) problems.push(`${id} tokens differ at ${k}: ${a.tokens[k]} vs ${b.tokens[k]}`);
    if (bitwiseEqual(a.lastLogits, b.lastLogits)) bitwise++;
    else problems.push(`${id} final logits differ (max |diff| ${fmt(maxAbsDiff(a.lastLogits, b.lastLogits))})`);
  }
  report(problems.length ? 'FAIL' : 'PASS', 'rope', name, problems.length ? problems.slice(0, 4).join('; ') : `RoPE epilogue == separate launch: ${plain.size} sequences, tokens identical, final logits bitwise ${bitwise}/${plain.size}`);
}

// ---------------------------------------------------------------- main

// ---------------------------------------------------------------- speculative verification

/** Plain decode of `n` tokens after prompt (one row per step), with its own blocks from `first`. */
async function plainDecode(model, prompt, n, sample, first) {
  const bs = model.info().blockSize;
  const table = Int32Array.from({ length: Math.ceil((prompt.length + n + 16) / bs) }, (_, i) => first + i);
  const out = [];
  let toks = prompt;
  let ctx = 0;
  for (let i = 0; i < n; i++) {
    const r = (await model.step({ rows: [{ requestId: 'p', tokens: Int32Array.from(toks), positions: Int32Array.from(toks, (_, j) => ctx + j), blockTable: table, contextLen: ctx, sample: { ...sample, counter: i } }] })).rows[0];
    if (r.error) throw new Error(`plain step ${i}: ${r.error}`);
    out.push(r.token);
    ctx += toks.length;
    toks = [r.token];
  }
  return out;
}

/** Decode with draft rows: at each step the draft is `draftFor(emitted so far)`; returns the emitted tokens. */
async function draftDecode(model, prompt, n, sample, first, draftFor) {
  const bs = model.info().blockSize;
  const table = Int32Array.from({ length: Math.ceil((prompt.length + n + 32) / bs) }, (_, i) => first + i);
  const r0 = (await model.step({ rows: [{ requestId: 'd', tokens: Int32Array.from(prompt), positions: Int32Array.from(prompt, (_, j) => j), blockTable: table, contextLen: 0, sample: { ...sample, counter: 0 } }] })).rows[0];
  if (r0.error) throw new Error(`prefill: ${r0.error}`);
  const out = [r0.token];
  let ctx = prompt.length;
  while (out.length < n) {
    const draft = draftFor(out).slice(0, Math.max(0, n - out.length - 1));
    const toks = [out[out.length - 1], ...draft];
    const row = { requestId: 'd', tokens: Int32Array.from(toks), positions: Int32Array.from(toks, (_, j) => ctx + j), blockTable: table, contextLen: ctx, sample: { ...sample, counter: out.length } };
    if (draft.length) row.draft = draft.length;
    const r = (await model.step({ rows: [row] })).rows[0];
    if (r.error) throw new Error(`draft step at ${out.length}: ${r.error}`);
    const kept = draft.length ? r.accepted : 0;
    out.push(...draft.slice(0, kept), r.token);
    ctx += 1 + kept;
  }
  return out.slice(0, n);
}

async function specChecks(addon, device, fx) {
  for (const precision of ['exact', 'fast']) {
    const name = `${fx.name} ${precision} draft rows`;
    const model = load(addon, fx.dir, { device, kvCacheBytes: FIXTURE_KV, precision }, 'spec', name);
    if (!model) continue;
    await guard('spec', name, async () => {
      try {
        const problems = [];
        const prompt = fx.ref.prompts[0].ids;
        const bs = model.info().blockSize;
        const table = Int32Array.from({ length: Math.ceil((prompt.length + 16) / bs) }, (_, i) => i);
        const ctx = prompt.length - 1;
        await model.step({ rows: [{ requestId: 'l', tokens: Int32Array.from(prompt.slice(0, ctx)), positions: Int32Array.from({ length: ctx }, (_, i) => i), blockTable: table, contextLen: 0 }] });
        const one = (await model.step({ rows: [{ requestId: 'l', tokens: Int32Array.of(prompt[ctx]), positions: Int32Array.of(ctx), blockTable: table, contextLen: ctx, wantLogits: true }] })).rows[0].logits;
        for (const k of [1, 4, 8]) {
          const toks = Int32Array.from({ length: k + 1 }, (_, i) => (i === 0 ? prompt[ctx] : 10 + i));
          const multi = (await model.step({ rows: [{ requestId: 'l', tokens: toks, positions: Int32Array.from(toks, (_, i) => ctx + i), blockTable: table, contextLen: ctx, wantLogits: true }] })).rows[0].logits;
          if (!bitwiseEqual(one, multi.subarray(0, one.length))) problems.push(`logits of a ${k + 1}-token row differ from a decode row (max |diff| ${maxAbsDiff(one, multi.subarray(0, one.length))})`);
        }
        const N = 24;
        const drawn = { ...GREEDY, temperature: 0.8, topP: 0.95, seed: 11 };
        for (const [label, sample] of [['greedy', GREEDY], ['drawn', drawn]]) {
          const plain = await plainDecode(model, prompt, N, sample, 64);
          const right = await draftDecode(model, prompt, N, sample, 128, (o) => plain.slice(o.length, o.length + 4));
          const wrong = await draftDecode(model, prompt, N, sample, 192, (o) => [(plain[o.length] ?? 0) + 1, 3, 4]);
          const mixed = await draftDecode(model, prompt, N, sample, 256, (o) => [plain[o.length] ?? 0, (plain[o.length + 1] ?? 0) + 1]);
          for (const [how, got] of [['right drafts', right], ['wrong drafts', wrong], ['half-right drafts', mixed]])
            if (got.join(',') !== plain.join(',')) problems.push(`${label} with ${how}: ${got.join(',')} != plain ${plain.join(',')}`);
        }
        report(problems.length ? 'FAIL' : 'PASS', 'spec', name, problems.length ? problems.slice(0, 3).join('; ') : `decode = multi-token row logits bitwise (k 1, 4, 8); greedy and drawn tokens with right, wrong and half-right drafts = plain (${N} tokens)`);
      } finally {
        model.close();
      }
    });
  }
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  strict = o.strict;
  const addon = loadAddon(o.addon);
  const models = modelFixtures(o.filter);
  const { fixtures: vlms, skipped: vlmSkipped } = vlmTextFixtures(o.filter);

  if (o.emit) {
    const raw = await agreeRuns(addon, o.device, models, vlms);
    for (const v of Object.values(raw)) if (v.logits) v.logits = v.logits.map((rows) => rows.map((f) => Buffer.from(f.buffer, f.byteOffset, f.byteLength).toString('base64')));
    writeFileSync(o.emit, JSON.stringify(raw));
    return;
  }

  const want = (c) => !o.only || o.only.has(c);
  const t0 = performance.now();
  console.log(`rapid cuda-checks: addon ${o.addon} (abi ${addon.abi}, version ${addon.version}), device ${o.device}; ${models.length} model fixtures, ${vlms.length} VLM text lanes${vlmSkipped.length ? ` (skipped: ${vlmSkipped.join(', ')})` : ''}`);

  if (want('device')) {
    if (o.device === 'cuda') deviceChecks(addon, models[0]);
    else console.log('(device checks are CUDA-only: not run with --device cpu)');
  }
  if (want('parity')) {
    for (const fx of models) await parityModel(addon, o.device, fx);
    for (const fx of vlms) await parityVlmText(addon, o.device, fx);
  }
  if (want('batch')) {
    for (const fx of models)
      for (const precision of ['exact', 'fast']) await batchInvariance(addon, o.device, fx.name, fx.dir, precision, FIXTURE_KV, fx.ref.prompts.map((p) => p.ids), true);
    for (const fx of vlms) await batchInvariance(addon, o.device, fx.name, fx.dir, 'exact', FIXTURE_KV, [fx.text.input_ids], true);
    for (const dir of o.models)
      for (const precision of ['exact', 'fast']) await batchInvariance(addon, o.device, dir, dir, precision, o.kvBytes, [], false);
  }
  if (want('agree')) {
    await guard('agree', 'runs', async () => {
      const cpu = o.cpuAddon ? agreeRunsInChild(o.cpuAddon, o) : await agreeRuns(addon, 'cpu', models, vlms);
      const dev = await agreeRuns(addon, o.device, models, vlms);
      compareAgree(cpu, dev, o.device);
    });
  }
  if (want('errors')) {
    const fx = models.find((f) => f.name === 'qwen2-f32') ?? models[0];
    if (fx) {
      await errorPaths(addon, o.device, fx);
      if (o.device === 'cuda') kvTooLarge(addon, fx);
      else console.log('(KV-budget-beyond-device-memory check is CUDA-only: not run with --device cpu)');
    }
  }

  if (want('bias')) {
    const fx = models.find((f) => f.name === 'qwen2-f32') ?? models[0];
    if (fx) await biasChecks(addon, o.device, fx);
  }

  if (want('sampling')) {
    const fx = models.find((f) => f.name === 'qwen2-f32') ?? models[0];
    if (fx) await samplingChecks(addon, o.device, fx);
  }

  if (want('rope')) {
    if (o.device === 'cuda') for (const fx of models.filter((f) => /^(llama|qwen2)-q[48]$/.test(f.name))) await ropeEpilogueChecks(addon, fx);
    else console.log('(RoPE-epilogue checks are CUDA-only: not run with --device cpu)');
  }
  if (want('ahead')) {
    if (o.device === 'cuda') for (const fx of models.filter((f) => /^(qwen2-f32|llama-q4|gemma3-q8)$/.test(f.name))) await aheadChecks(addon, fx);
    else console.log('(step-ahead checks are CUDA-only: not run with --device cpu)');
  }

  if (want('pool')) await poolChecks(addon, o.device);
  if (want('kvdtype')) for (const fx of models.filter((f) => /-f32$/.test(f.name) && !f.name.includes('embedding'))) await kvDtypeChecks(addon, o.device, fx);
  if (want('spec')) for (const fx of models.filter((f) => /^(qwen2-f32|llama-q4|gemma3-q8|qwen3-bf16)$/.test(f.name))) await specChecks(addon, o.device, fx);

  const count = (s) => results.filter((r) => r.status === s).length;
  const [passed, failed, skipped] = [count('PASS'), count('FAIL'), count('SKIP')];
  if (passed + failed === 0) report('FAIL', 'harness', 'nothing ran', 'no checks were run (no fixtures found?)');
  console.log(`${count('PASS')} passed, ${count('FAIL')} failed${skipped ? `, ${skipped} skipped` : ''} (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
  if (o.json) writeFileSync(o.json, JSON.stringify({ addon: o.addon, device: o.device, abi: addon.abi, version: addon.version, passed: count('PASS'), failed: count('FAIL'), skipped, results }, null, 2));
  process.exitCode = count('FAIL') > 0 ? 1 : 0;
}

main().catch((e) => {
  console.error(`FAIL harness: ${e instanceof Error ? e.stack ?? e.message : String(e)}`);
  process.exitCode = 1;
});
