// rapid's half of scripts/replicas/parity_full.py: the native addon (dist/ + build/) on a full-size replica and
// the prompts of its reference.json. Text prompts run as one batched step, then batched greedy decode; each
// image case decodes its PNG, preprocesses it with rapid's own image processor (rows compared with the HF
// processor's), runs encodeImage and splices the rows at the placeholder offsets. Exact precision.
//   node scripts/replicas/parity_rapid.mjs --dir MODEL_DIR --out OUT [--device cpu|cuda] [--threads N] [--resume]
//     [--cases text0,one_image,two_images: only those]
// Writes OUT/rapid-<device>.json ({cases: {name: {logits, greedy, pixels_err}}, device, load_s, steps}) and
// OUT/<case>.rapid-<device>.f32, the JSON after every case: --resume skips the cases an earlier run recorded (a
// 24B model's CPU cases can outlast one device call).
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const root = resolve(import.meta.dirname, '..', '..');
const { loadNative } = await import(join(root, 'dist', 'native', 'binding.js'));
const { decodeImage } = await import(join(root, 'dist', 'vision', 'decode-image.js'));
const { readProcessorFiles } = await import(join(root, 'dist', 'vision', 'image-processor-config.js'));
const { gemma4ImageConfig } = await import(join(root, 'dist', 'vision', 'gemma4-image-processor.js'));
const { pixtralImageConfig } = await import(join(root, 'dist', 'vision', 'pixtral-image-processor.js'));
const { gemma3ImageConfig } = await import(join(root, 'dist', 'vision', 'gemma3-image-processor.js'));
const { prepareWithSpec } = await import(join(root, 'dist', 'vision', 'prepare-image.js'));
const { GREEDY_SAMPLE } = await import(join(root, 'dist', 'engine', 'sampling-params.js'));
const { qwenImageConfig } = await import(join(root, 'dist', 'vision', 'qwen-image-processor.js'));
const { mropePositions } = await import(join(root, 'dist', 'vision', 'mrope-positions.js'));

const { values: opt } = parseArgs({
  options: {
    dir: { type: 'string' }, out: { type: 'string' }, device: { type: 'string', default: 'cpu' }, threads: { type: 'string' },
    'kv-gib': { type: 'string', default: '2' }, resume: { type: 'boolean', default: false }, cases: { type: 'string' },
  },
});
if (!opt.dir || !opt.out) throw new Error('usage: parity_rapid.mjs --dir MODEL_DIR --out OUT [--device cpu|cuda] [--threads N] [--resume]');
const ref = JSON.parse(readFileSync(join(opt.out, 'reference.json'), 'utf8'));
const config = JSON.parse(readFileSync(join(opt.dir, 'config.json'), 'utf8'));

/** The family's preprocessing spec from the replica's processor files (what VisionProcessor.load builds). */
function imageSpec() {
  const { image, processor } = readProcessorFiles(opt.dir);
  if (config.model_type === 'gemma4') return { kind: 'gemma4', image: gemma4ImageConfig(image, config, opt.dir) };
  if (config.model_type === 'gemma3') return { kind: 'gemma3', image: gemma3ImageConfig(image, processor, config, opt.dir) };
  if (config.model_type === 'mistral3') return { kind: 'pixtral', image: pixtralImageConfig(image, processor, config, opt.dir) };
  if (config.model_type === 'qwen2_5_vl' || config.model_type === 'qwen3_vl' || config.model_type === 'qwen3_vl_moe') {
    const family = config.model_type === 'qwen2_5_vl' ? 'qwen2_5_vl' : 'qwen3_vl'; // the MoE shares Qwen3-VL's processor
    return { kind: 'qwen', image: qwenImageConfig(family, image, config.vision_config, opt.dir) };
  }
  throw new Error(`parity_rapid: no image spec for model_type ${config.model_type}`);
}

const t0 = performance.now();
const native = loadNative({ device: opt.device });
const model = native.addon.loadModel(opt.dir, {
  threads: opt.threads ? Number(opt.threads) : undefined,
  // One case at a time: 2 GiB holds a two-image prompt of the 24B model (40 layers x 8 KV heads x 128, f32).
  kvCacheBytes: Math.round(Number(opt['kv-gib']) * 2 ** 30),
  precision: 'exact',
  device: opt.device,
});
const loadS = (performance.now() - t0) / 1000;
const info = model.info();
console.log(`  rapid: loaded in ${loadS.toFixed(1)}s on ${info.device} (vocab ${info.vocabSize}, hidden ${info.hiddenSize})`);
// A model the GPU backend holds back runs on the CPU with a note: that is not a GPU parity result.
if (info.device !== opt.device) throw new Error(`parity_rapid: asked ${opt.device}, got ${info.device}: ${info.deviceNote ?? ''}`);

let nextBlock = 0;
const blocksFor = (n) => {
  const k = Math.ceil(n / info.blockSize);
  if (nextBlock + k > info.numBlocks) throw new Error(`KV pool too small: ${info.numBlocks} blocks`);
  const t = Int32Array.from({ length: k }, (_, i) => nextBlock + i);
  nextBlock += k;
  return t;
};

// mRoPE models (Qwen-VL) take 3 position axes, axis-major: s.positions [3 * n] for a prompt with images, text
// positions on every axis otherwise; decode positions are index + s.delta on every axis, as the engine does.
const axes = info.mropeSections ? 3 : 1;
const promptPositions = (s) => s.positions ?? Int32Array.from({ length: axes * s.ids.length }, (_, i) => i % s.ids.length);
const decodePosition = (s, index) => new Int32Array(axes).fill(index + (s.delta ?? 0));

/** Prefill every sequence in one step (logits of every prompt position), then greedy decode together. */
async function run(seqs) {
  nextBlock = 0; // the previous case's sequences are finished: their blocks are free again
  const maxLen = Math.max(...seqs.map((s) => s.ids.length)) + ref.n_greedy;
  for (const s of seqs) s.table = blocksFor(maxLen);
  const rows = seqs.map((s) => {
    const row = {
      requestId: s.name,
      tokens: Int32Array.from(s.ids),
      positions: promptPositions(s),
      blockTable: s.table,
      contextLen: 0,
      sample: { ...GREEDY_SAMPLE, counter: 0 },
      wantLogits: true,
    };
    if (s.embeds) row.embeds = s.embeds;
    if (s.bidirectional) row.bidirectional = s.bidirectional;
    return row;
  });
  const res = await model.step({ rows });
  for (const r of res.rows) {
    if (r.error) throw new Error(`${r.requestId}: ${r.error}`);
    const s = seqs.find((x) => x.name === r.requestId);
    s.logits = r.logits;
    s.greedy = [r.token];
  }
  for (let k = 1; k < ref.n_greedy; k++) {
    const dec = seqs.map((s) => ({
      requestId: s.name,
      tokens: Int32Array.of(s.greedy.at(-1)),
      positions: decodePosition(s, s.ids.length + k - 1),
      blockTable: s.table,
      contextLen: s.ids.length + k - 1,
      sample: { ...GREEDY_SAMPLE, counter: k },
    }));
    const out = await model.step({ rows: dec });
    for (const r of out.rows) {
      if (r.error) throw new Error(`${r.requestId}: ${r.error}`);
      seqs.find((x) => x.name === r.requestId).greedy.push(r.token);
    }
  }
}

const vocab = info.vocabSize;
const resultFile = join(opt.out, `rapid-${opt.device}.json`);
const earlier = opt.resume && existsSync(resultFile) ? JSON.parse(readFileSync(resultFile, 'utf8')) : undefined;
const result = { device: info.device, device_name: info.deviceName, load_s: loadS, cases: { ...earlier?.cases },
  steps: { ...earlier?.steps } };
const save = () => writeFileSync(resultFile, JSON.stringify(result, null, 1));
// --cases NAME,...: only those (the 8 text prompts run as one batch when any of them is named)
const only = opt.cases ? new Set(opt.cases.split(',')) : undefined;
const pending = (c) => !(c.name in result.cases) && (!only || only.has(c.name));
function record(s, c) {
  const got = new Float32Array(c.logits_positions.length * vocab);
  c.logits_positions.forEach((p, i) => got.set(s.logits.subarray(p * vocab, (p + 1) * vocab), i * vocab));
  const file = `${c.name}.rapid-${opt.device}.f32`;
  writeFileSync(join(opt.out, file), Buffer.from(got.buffer));
  result.cases[c.name] = { logits: file, greedy: s.greedy, ...(s.pixelsErr !== undefined ? { pixels_err: s.pixelsErr } : {}) };
}

/** An embedding model: each prompt's pooled vector (the last token's hidden state after the final norm). */
async function pool(c) {
  const res = await model.step({ rows: [{ requestId: c.name, tokens: Int32Array.from(c.input_ids), positions: promptPositions({ ids: c.input_ids }),
    blockTable: blocksFor(c.input_ids.length), contextLen: 0, wantHidden: true }] });
  const r = res.rows[0];
  if (r.error) throw new Error(`${c.name}: ${r.error}`);
  const file = `${c.name}.rapid-${opt.device}.hidden.f32`;
  writeFileSync(join(opt.out, file), Buffer.from(r.hidden.buffer, r.hidden.byteOffset, r.hidden.byteLength));
  result.cases[c.name] = { hidden: file };
}

const text = ref.cases.filter((c) => c.images.length === 0);
let t = performance.now();
if (text.some(pending)) {
  if (ref.pooling) { // an embedding model's cases are all text
    for (const c of text) {
      nextBlock = 0;
      await pool(c);
    }
  } else {
    const seqs = text.map((c) => ({ name: c.name, ids: c.input_ids }));
    await run(seqs);
    text.forEach((c, i) => record(seqs[i], c));
  }
  result.steps.text_s = (performance.now() - t) / 1000;
  save();
  console.log(`  rapid: ${text.length} text prompts in ${result.steps.text_s.toFixed(1)}s${ref.pooling ? ' (pooled)' : ''}`);
}

const spec = ref.cases.some((c) => c.images.length) ? imageSpec() : undefined;
for (const c of ref.cases.filter((x) => x.images.length > 0 && pending(x))) {
  t = performance.now();
  const parts = [];
  let pixelsErr = 0;
  for (const im of c.images) {
    const prepared = prepareWithSpec(spec, await decodeImage(readFileSync(join(opt.out, ref.images_dir, im.file))));
    if (prepared.tokens !== im.tokens) throw new Error(`${c.name} ${im.file}: rapid expands to ${prepared.tokens} tokens, transformers ${im.tokens}`);
    const buf = readFileSync(join(opt.out, im.pixel_values));
    const want = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
    if (want.length !== prepared.input.pixels.length) throw new Error(`${c.name} ${im.file}: ${prepared.input.pixels.length} pixel values, transformers ${want.length}`);
    for (let i = 0; i < want.length; i++) pixelsErr = Math.max(pixelsErr, Math.abs(want[i] - prepared.input.pixels[i]));
    const enc = await model.encodeImage(prepared.input);
    parts.push({ offset: im.offset, tokens: enc.tokens, data: enc.embeddings, deepstack: enc.deepstack, grid: prepared.input.grid });
  }
  // The rows go to the image-token positions in order (Pixtral's [IMG_BREAK]/[IMG_END] sit between rows).
  const m = parts.reduce((a, p) => a + p.tokens, 0);
  const offsets = new Int32Array(m);
  const data = new Float32Array(m * info.hiddenSize);
  // Qwen3-VL DeepStack: [layers, tokens, hidden] per image -> [layers, m, hidden] for the row.
  const layers = parts[0].deepstack ? parts[0].deepstack.length / (parts[0].tokens * info.hiddenSize) : 0;
  const deepstack = layers ? new Float32Array(layers * m * info.hiddenSize) : undefined;
  let k = 0;
  for (const p of parts) {
    data.set(p.data, k * info.hiddenSize);
    for (let i = 0; i < p.tokens; i++) offsets[k + i] = p.offset + i;
    for (let l = 0; l < layers; l++) {
      const per = p.tokens * info.hiddenSize;
      deepstack.set(p.deepstack.subarray(l * per, (l + 1) * per), (l * m + k) * info.hiddenSize);
    }
    k += p.tokens;
  }
  if (ref.image_token_id !== undefined) {
    const at = c.input_ids.flatMap((t, i) => (t === ref.image_token_id ? [i] : []));
    if (at.length !== m) throw new Error(`${c.name}: ${at.length} image tokens in the prompt, ${m} embedding rows`);
    offsets.set(at);
  }
  const s = { name: c.name, ids: c.input_ids, embeds: deepstack ? { offsets, data, deepstack } : { offsets, data }, pixelsErr };
  if (axes === 3) {
    const merge = config.vision_config.spatial_merge_size;
    const mr = mropePositions(c.input_ids.length, parts.map((p) => ({ offset: p.offset, grid: p.grid })), merge);
    s.positions = mr.positions;
    s.delta = mr.ropeDelta;
  }
  if (ref.bidirectional) s.bidirectional = Int32Array.from(parts.flatMap((p) => [p.offset, p.offset + p.tokens]));
  await run([s]);
  record(s, c);
  result.steps[`${c.name}_s`] = (performance.now() - t) / 1000;
  save();
  console.log(`  rapid: ${c.name} (${c.input_ids.length} tokens) in ${result.steps[`${c.name}_s`].toFixed(1)}s, pixels max |diff| ${pixelsErr}`);
}
model.close();
