// VLM checkpoints against transformers (fixtures from scripts/fixtures/vision): the vision tower's
// embeddings, the text lane's logits with image features spliced at the placeholders (mRoPE positions,
// DeepStack, Gemma 3 bidirectional image blocks), 16 greedy tokens, and batch invariance of image and
// text rows together. Tolerances (stated, exact precision): features max |diff| <= 1e-4 * max(1, max|f|)
// for every variant; logits max |diff| <= 1e-4 * max(1, max|logit|) for f32 checkpoints and the text
// parity tests' 1e-3 for quantized ones; greedy tokens identical.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NativeModel } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { maxAbsDiff } from '../helpers/fixtures.js';
import { GREEDY } from '../helpers/runner.js';
import { readSafetensors, writeSafetensors } from '../helpers/safetensors.js';
import {
  expectBatchInvariant, expectTextCase, expectWithin, imageChunks, loadVlmFixture, maxAbs, readF32, runVlmSequences, storedImages, vlmFixtureNames,
  type SeqImage, type VlmCase, type VlmFixture, type VlmSeqSpec,
} from '../helpers/vlm.js';

// Mistral 3 (Pixtral spans with row breaks, YaRN) has its own file: test/model/mistral3.test.ts; Gemma 4
// (sliding-only image blocks, logits at listed positions): test/model/gemma4.test.ts and gemma4-vision.test.ts;
// Qwen3-VL-MoE (Qwen3-VL's tower, expert layouts, expert reads per step): test/model/qwen3-vl-moe.test.ts.
const names = vlmFixtureNames().filter((n) => !n.startsWith('mistral3-') && !n.startsWith('gemma4-') && !n.startsWith('qwen3_vl_moe-'));
const report: string[] = [];
afterAll(() => {
  if (report.length) console.log(`vlm summary:\n${report.join('\n')}`);
});

const isF32 = (name: string) => name.endsWith('-f32');

function specOf(fx: VlmFixture, c: VlmCase, images: SeqImage[], extra: Partial<VlmSeqSpec> = {}): VlmSeqSpec {
  return {
    id: c.name,
    prompt: c.input_ids,
    positions: c.position_ids,
    delta: c.rope_delta ?? 0,
    images,
    bidirectional: fx.family === 'gemma3',
    maxTokens: c.greedy.length,
    ...extra,
  };
}

describe.each(names)('%s', (name) => {
  const fx = loadVlmFixture(name);
  const logitTol = isF32(name) ? 1e-4 : 1e-3;
  const featTol = 1e-4;
  let model: NativeModel;
  // Images as the step receives them: the tower's output when it exists, else the stored features.
  const encoded = new Map<string, SeqImage[]>();
  beforeAll(() => {
    model = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 16 << 20, precision: 'exact' });
  });
  afterAll(() => model.close());

  it('reports the vision tower and mRoPE layout', () => {
    const info = model.info();
    expect(info.vision?.family).toBe(fx.family);
    if (fx.family === 'gemma3') expect(info.mropeSections).toBeUndefined();
    else expect(info.mropeSections?.length).toBe(3);
    expect(info.vision!.deepstackLayers > 0).toBe(fx.family === 'qwen3_vl');
  });

  it('encodeImage(pixel_values) matches the stored features', async () => {
    let worst = 0;
    for (const c of fx.cases) {
      const imgs: SeqImage[] = [];
      for (const im of c.images) {
        const out = await model.encodeImage({ pixels: readF32(fx.dir, im.pixel_values), grid: im.grid });
        expect(out.tokens).toBe(im.tokens);
        worst = Math.max(worst, expectWithin(out.embeddings, readF32(fx.dir, im.features), featTol, `${c.name} features`));
        if (im.deepstack) {
          const ds = readF32(fx.dir, im.deepstack);
          expect(out.deepstack, 'deepstack present').toBeDefined();
          expect(maxAbsDiff(out.deepstack!, ds), `${c.name} deepstack`).toBeLessThanOrEqual(featTol * Math.max(1, maxAbs(ds)));
        }
        imgs.push({ offset: im.placeholder_offset, tokens: out.tokens, data: out.embeddings, deepstack: out.deepstack });
      }
      encoded.set(c.name, imgs);
    }
    report.push(`${name} features: max |diff|/max(1,|f|) = ${worst.toExponential(2)}`);
  });

  it('a text-only prompt needs no encodeImage', async () => {
    const c = fx.cases.find((x) => x.images.length === 0)!;
    const out = (await runVlmSequences(model, [specOf(fx, c, [])])).get(c.name)!;
    expect(out.errors).toEqual([]);
    expect(out.tokens).toEqual(c.greedy);
  });

  for (const source of ['stored features', 'encodeImage output'] as const) {
    it(`logits and 16 greedy tokens match transformers (${source})`, async () => {
      let worst = 0;
      for (const c of fx.cases) {
        const images = source === 'stored features' ? storedImages(fx.dir, c) : encoded.get(c.name);
        expect(images, 'encodeImage ran first').toBeDefined();
        const out = (await runVlmSequences(model, [specOf(fx, c, images!, { wantLogits: true })])).get(c.name)!;
        expect(out.errors).toEqual([]);
        const vocab = model.info().vocabSize;
        const got = out.logits!.subarray(out.logits!.length - c.n_last * vocab);
        worst = Math.max(worst, expectWithin(got, readF32(fx.dir, c.logits), logitTol, `${c.name} logits`));
        expect(out.tokens, `${c.name} greedy`).toEqual(c.greedy);
      }
      report.push(`${name} logits (${source}): max |diff|/max(1,|logit|) = ${worst.toExponential(2)}`);
    });
  }

  describe('batch invariance', () => {
    const two = fx.cases.find((c) => c.images.length === 2);
    const one = fx.cases.find((c) => c.images.length === 1);
    const text = fx.cases.find((c) => c.images.length === 0)!;
    const cases = [two, one, text].filter((c): c is VlmCase => c !== undefined);
    for (const precision of ['exact', 'fast'] as const) {
      it(`two-image, one-image and text rows in one step and joined mid-stream (${precision})`, async () => {
        const m = precision === 'exact' ? model : addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 16 << 20, precision });
        try {
          // Joined mid-stream, prefilled in chunks that end at image boundaries (never split an image).
          await expectBatchInvariant(m, cases, (c, extra) => specOf(fx, c, storedImages(fx.dir, c), extra), imageChunks, precision === 'exact');
        } finally {
          if (m !== model) m.close();
        }
      });
    }
  });
});

// Gemma 3's bidirectional image blocks, checked by their effect (the reference logits cover only the
// last prompt rows, where the tiny model barely feels the mask): with the block, an image token's
// logits depend on a LATER token of its image; without it (plain causal), they cannot.
describe.runIf(names.some((n) => n.startsWith('gemma3')))('Gemma 3 bidirectional image blocks', () => {
  it('an image token sees later tokens of its own image only when the block is given', async () => {
    const fx = loadVlmFixture(names.find((n) => n.startsWith('gemma3'))!);
    const c = fx.cases.find((x) => x.images.length === 1)!;
    const im = c.images[0]!;
    const model = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
    try {
      const H = model.info().hiddenSize;
      const V = model.info().vocabSize;
      const data = readF32(fx.dir, im.features);
      const perturbed = data.slice();
      for (let i = (im.tokens - 1) * H; i < im.tokens * H; i++) perturbed[i] = perturbed[i]! + 1;
      const n = c.input_ids.length;
      const logitsOf = async (feat: Float32Array, bidir: boolean, id: string, block: number) => {
        const r = (await model.step({
          rows: [{
            requestId: id, tokens: Int32Array.from(c.input_ids), positions: Int32Array.from(c.input_ids, (_, i) => i),
            blockTable: Int32Array.from({ length: Math.ceil(n / model.info().blockSize) }, (_, i) => block + i), contextLen: 0,
            embeds: { offsets: Int32Array.from({ length: im.tokens }, (_, i) => im.placeholder_offset + i), data: feat },
            ...(bidir ? { bidirectional: Int32Array.of(im.placeholder_offset, im.placeholder_offset + im.tokens) } : {}),
            wantLogits: true,
          }],
        })).rows[0]!;
        expect(r.error).toBeUndefined();
        return r.logits!.subarray(im.placeholder_offset * V, (im.placeholder_offset + 1) * V);
      };
      const nb = Math.ceil(n / model.info().blockSize);
      expect(maxAbsDiff(await logitsOf(data, true, 'a', 0), await logitsOf(perturbed, true, 'b', nb))).toBeGreaterThan(1e-3);
      expect(maxAbsDiff(await logitsOf(data, false, 'c', 2 * nb), await logitsOf(perturbed, false, 'd', 3 * nb))).toBe(0);
    } finally {
      model.close();
    }
  });
});

// Key layouts and config shapes of the hub beyond the fixtures' own: HF 5 (model.language_model.*,
// model.visual.* / model.vision_tower.vision_model.*), transformers 4.x flat Qwen2.5-VL configs
// (rope_scaling {type: mrope}), and Qwen3-VL hub configs (rope_scaling + rope_theta in text_config).
describe('VLM checkpoint layouts', () => {
  const temps: string[] = [];
  afterAll(() => {
    for (const t of temps) rmSync(t, { recursive: true, force: true });
  });
  type Cfg = Record<string, unknown>;
  function variant(fx: VlmFixture, rename: (k: string) => string, config: (c: Cfg) => Cfg): string {
    const dst = mkdtempSync(join(tmpdir(), `rapid-vlm-layout-${fx.name}-`));
    temps.push(dst);
    const t = readSafetensors(join(fx.dir, 'model.safetensors'));
    writeSafetensors(join(dst, 'model.safetensors'), new Map([...t].map(([k, v]) => [rename(k), v])));
    const cfg = JSON.parse(readFileSync(join(fx.dir, 'config.json'), 'utf8')) as Cfg;
    writeFileSync(join(dst, 'config.json'), JSON.stringify(config(cfg)));
    return dst;
  }
  const cases: [string, string, (k: string) => string, (c: Cfg) => Cfg][] = [
    ['qwen2_5_vl-f32', 'HF 5 keys', (k) => k.replace(/^model\./, 'model.language_model.').replace(/^visual\./, 'model.visual.'), (c) => c],
    ['qwen2_5_vl-f32', 'a flat transformers 4.x config', (k) => k, (c) => {
      const { text_config, ...top } = c as { text_config: Cfg & { rope_parameters: Cfg } };
      const { rope_parameters: rp, ...text } = text_config;
      return { ...top, ...text, rope_theta: rp.rope_theta, rope_scaling: { type: 'mrope', mrope_section: rp.mrope_section } };
    }],
    ['qwen3_vl-f32', 'a hub config (rope_scaling)', (k) => k, (c) => {
      const { rope_parameters: rp, ...text } = c.text_config as Cfg & { rope_parameters: Cfg };
      const { rope_theta, ...scaling } = rp;
      return { ...c, text_config: { ...text, rope_theta, rope_scaling: scaling } };
    }],
    ['gemma3-f32', 'HF 5 keys with the vision_model. segment',
      (k) => k.replace(/^language_model\.model\./, 'model.language_model.').replace(/^vision_tower\./, 'model.vision_tower.vision_model.').replace(/^multi_modal_projector\./, 'model.multi_modal_projector.'),
      (c) => c],
  ];
  // mRoPE with T = H = W is 1-D RoPE: the text lane of a VLM is exactly its text model.
  it.runIf(names.includes('qwen2_5_vl-f32'))('a text prompt on the VLM equals its weights loaded as Qwen2ForCausalLM', async () => {
    const fx = loadVlmFixture('qwen2_5_vl-f32');
    const dir = variant(fx, (k) => k, (c) => {
      const { text_config, vision_config: _v, architectures: _a, model_type: _t, ...top } = c as Cfg & { text_config: Cfg };
      return { ...top, ...text_config, architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2' };
    });
    const m = addon().loadModel(dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
    try {
      expect(m.info().family).toBe('qwen2');
      expect(m.info().vision).toBeUndefined();
      await expectTextCase(m, fx);
    } finally {
      m.close();
    }
  });

  for (const [name, label, rename, config] of cases) {
    it.runIf(names.includes(name))(`${name} with ${label} gives the same features, logits and tokens`, async () => {
      const fx = loadVlmFixture(name);
      const m = addon().loadModel(variant(fx, rename, config), { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
      try {
        expect(m.info().vision?.family).toBe(fx.family);
        const c = fx.cases.reduce((x, y) => (y.images.length > x.images.length ? y : x));
        const images: SeqImage[] = [];
        for (const im of c.images) {
          const out = await m.encodeImage({ pixels: readF32(fx.dir, im.pixel_values), grid: im.grid });
          expect(maxAbsDiff(out.embeddings, readF32(fx.dir, im.features))).toBeLessThanOrEqual(1e-4 * Math.max(1, maxAbs(readF32(fx.dir, im.features))));
          images.push({ offset: im.placeholder_offset, tokens: out.tokens, data: out.embeddings, deepstack: out.deepstack });
        }
        const out = (await runVlmSequences(m, [specOf(fx, c, images, { wantLogits: true })])).get(c.name)!;
        expect(out.errors).toEqual([]);
        const ref = readF32(fx.dir, c.logits);
        const got = out.logits!.subarray(out.logits!.length - ref.length);
        expect(maxAbsDiff(got, ref)).toBeLessThanOrEqual(1e-4 * Math.max(1, maxAbs(ref)));
        expect(out.tokens).toEqual(c.greedy);
      } finally {
        m.close();
      }
    });
  }
});

// Malformed image rows fail alone with a message naming the field; their neighbours still run.
describe.runIf(names.length > 0)('image row validation', () => {
  const fx = loadVlmFixture(names.find((n) => n.startsWith('qwen3_vl')) ?? names[0]!);
  let model: NativeModel;
  beforeAll(() => {
    model = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
  });
  afterAll(() => model.close());

  it('bad offsets, data or deepstack length, and bidirectional pairs are row errors', async () => {
    const info = model.info();
    const H = info.hiddenSize;
    const ds = info.vision!.deepstackLayers;
    let block = 0;
    const row = (id: string, extra: object) => ({
      requestId: id, tokens: Int32Array.of(1, 2, 3, 4), positions: new Int32Array((info.mropeSections ? 3 : 1) * 4),
      blockTable: Int32Array.of(block++), contextLen: 0, ...extra,
    });
    const emb = (offsets: number[], m = offsets.length, dsl = ds) => ({
      offsets: Int32Array.from(offsets), data: new Float32Array(m * H), ...(dsl ? { deepstack: new Float32Array(dsl * m * H) } : {}),
    });
    const res = await model.step({
      rows: [
        row('ok', { embeds: emb([1, 2]), bidirectional: Int32Array.of(1, 3), sample: { ...GREEDY } }),
        row('order', { embeds: emb([2, 1]) }),
        row('range', { embeds: emb([4]) }),
        row('data', { embeds: emb([1, 2], 1) }),
        row('pairs', { bidirectional: Int32Array.of(2, 5) }),
        row('odd', { bidirectional: Int32Array.of(1) }),
        ...(ds ? [row('ds', { embeds: emb([1], 1, ds + 1) })] : []),
      ],
    });
    const err = (id: string) => res.rows.find((r) => r.requestId === id)!.error;
    expect(err('ok')).toBeUndefined();
    expect(res.rows.find((r) => r.requestId === 'ok')!.token).toBeTypeOf('number');
    expect(err('order')).toMatch(/offsets must be strictly increasing/);
    expect(err('range')).toMatch(/outside the row's tokens/);
    expect(err('data')).toMatch(/embeds.data has/);
    expect(err('pairs')).toMatch(/bidirectional pair \[2, 5\)/);
    expect(err('odd')).toMatch(/even length/);
    if (ds) expect(err('ds')).toMatch(/embeds.deepstack has/);
  });

  it('encodeImages: every image of the fixture in one call, each bitwise its encodeImage; a bad one rejects the call', async () => {
    const inputs = fx.cases.flatMap((c) => c.images.map((im) => ({ pixels: readF32(fx.dir, im.pixel_values), grid: im.grid as [number, number, number] })));
    expect(inputs.length).toBeGreaterThan(1);
    const batch = [...inputs, inputs[0]!];
    const out = await model.encodeImages!(batch);
    expect(out.length).toBe(batch.length);
    for (const [i, input] of batch.entries()) {
      const one = await model.encodeImage(input);
      expect(out[i]!.tokens, `image ${i}`).toBe(one.tokens);
      expect(Buffer.from(out[i]!.embeddings.buffer).equals(Buffer.from(one.embeddings.buffer)), `image ${i} embeddings`).toBe(true);
      if (one.deepstack) expect(Buffer.from(out[i]!.deepstack!.buffer).equals(Buffer.from(one.deepstack.buffer)), `image ${i} deepstack`).toBe(true);
    }
    const bad = [...inputs];
    bad[bad.length - 1] = { ...bad[bad.length - 1]!, pixels: bad[bad.length - 1]!.pixels.subarray(1) };
    await expect(model.encodeImages!(bad)).rejects.toThrow(/bad image input/);
    await expect(model.encodeImages!([])).rejects.toThrow(/non-empty array/);
    await expect(model.encodeImages!([{ pixels: inputs[0]!.pixels, grid: [1, 2] as unknown as [number, number, number] }])).rejects.toThrow(/images\[0\]\.grid/);
  });

  it('encodeImage rejects a bad grid, a wrong pixel count and a concurrent call', async () => {
    const im = fx.cases.find((c) => c.images.length > 0)!.images[0]!;
    const pixels = readF32(fx.dir, im.pixel_values);
    await expect(model.encodeImage({ pixels, grid: [1, 0, 4] })).rejects.toThrow(/grid/);
    await expect(model.encodeImage({ pixels: pixels.subarray(1), grid: im.grid })).rejects.toThrow(/bad image input/);
    const first = model.encodeImage({ pixels, grid: im.grid });
    await expect(model.encodeImage({ pixels, grid: im.grid })).rejects.toThrow(/already in flight/);
    await expect(model.step({ rows: [] })).rejects.toThrow(/already in flight/);
    expect((await first).tokens).toBe(im.tokens);
  });
});

// rapid convert --quantize: text layers quantized, the vision tower and projector copied unquantized
// (mlx-vlm's skip list plus Qwen's "visual"), so the tower's output is unchanged.
describe.runIf(names.some((n) => n.endsWith('-f32')))('convert a VLM checkpoint', () => {
  it('keeps the vision tower unquantized and still loads it', async () => {
    const name = names.find((n) => n.endsWith('-f32'))!;
    const fx = loadVlmFixture(name);
    const dst = mkdtempSync(join(tmpdir(), 'rapid-vlm-convert-'));
    try {
      addon().convert(fx.dir, dst, { bits: 4, groupSize: 32 });
      const tensors = addon().inspectCheckpoint(dst);
      const vision = tensors.filter((t) => /(^|\.)(visual|vision_tower|multi_modal_projector)\./.test(t.name));
      expect(vision.length).toBeGreaterThan(0);
      expect(vision.filter((t) => t.dtype === 'U32' || t.name.endsWith('.scales'))).toEqual([]);
      expect(tensors.some((t) => t.name.endsWith('.scales'))).toBe(true);
      const src = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 4 << 20 });
      const q = addon().loadModel(dst, { threads: 2, kvCacheBytes: 4 << 20 });
      try {
        expect(q.info().quantization).toMatch(/4-bit/);
        expect(q.info().vision?.quantization).toBe('none');
        const im = fx.cases.find((c) => c.images.length > 0)!.images[0]!;
        const image = { pixels: readF32(fx.dir, im.pixel_values), grid: im.grid };
        const [a, b] = [await src.encodeImage(image), await q.encodeImage(image)];
        expect(maxAbsDiff(a.embeddings, b.embeddings)).toBe(0);
      } finally {
        src.close();
        q.close();
      }
    } finally {
      rmSync(dst, { recursive: true, force: true });
    }
  });
});

describe('image embeddings on the wrong model', () => {
  it.skipIf(names.length === 0)('a text-only checkpoint rejects a row with embeds; encodeImage rejects', async () => {
    const m = addon().loadModel(`${import.meta.dirname}/../fixtures/models/qwen2-f32`, { threads: 2, kvCacheBytes: 8 << 20 });
    try {
      const hidden = m.info().hiddenSize;
      const res = await m.step({
        rows: [{
          requestId: 'x', tokens: Int32Array.of(1, 2, 3), positions: Int32Array.of(0, 1, 2), blockTable: Int32Array.of(0), contextLen: 0,
          embeds: { offsets: Int32Array.of(1), data: new Float32Array(hidden) },
        }],
      });
      expect(res.rows[0]!.error).toMatch(/has no vision tower/);
      await expect(m.encodeImage({ pixels: new Float32Array(12), grid: [1, 2, 2] })).rejects.toThrow(/has no vision tower/);
    } finally {
      m.close();
    }
  });
});
