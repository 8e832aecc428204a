// Qwen3-VL-MoE (and Qwen3-MoE text) against transformers: fixtures from
// scripts/fixtures/vision/gen_qwen3_vl_moe.py (3 layers: experts in 0 and 2, a dense MLP in 1; 8 experts
// top-2). Tolerances (exact precision): logits max |diff| <= 1e-4 * max(1, max|logit|) for f32, 1e-3 for
// the MLX 4-bit variant (experts 4-bit, router gate 8-bit); greedy tokens identical. Also: batch
// invariance with text and image neighbours, the expert layouts of hub files (transposed fused
// [E, H, 2I] and per-expert tensors), and that a step reads each active expert's weights once.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NativeModel, NativeMoeStepStats, NativeStepPlan } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { maxAbsDiff } from '../helpers/fixtures.js';
import { readSafetensors, writeSafetensors, type RawTensor } from '../helpers/safetensors.js';
import {
  expectBatchInvariant, expectTextCase, expectWithin, imageChunks, loadVlmFixture, maxAbs, readF32, runVlmSequences, storedImages, vlmFixtureNames,
  type SeqImage, type VlmCase, type VlmFixture, type VlmSeqSpec,
} from '../helpers/vlm.js';

const VARIANTS = ['qwen3_vl_moe-f32', 'qwen3_vl_moe-q4'].filter((n) => vlmFixtureNames().includes(n));
const MOE_LAYERS = 2; // layers 0 and 2 (layer 1 is in mlp_only_layers)
const EXPERTS = 8;
const TOP_K = 2;
const HIDDEN = 64;
const FFN = 32;

const open = (dir: string, precision: 'exact' | 'fast' = 'exact') =>
  addon().loadModel(dir, { threads: 2, kvCacheBytes: 16 << 20, precision });

function specOf(c: VlmCase, images: SeqImage[], extra: Partial<VlmSeqSpec> = {}): VlmSeqSpec {
  return { id: c.name, prompt: c.input_ids, positions: c.position_ids, delta: c.rope_delta ?? 0, images, maxTokens: c.greedy.length, ...extra };
}

/** The model with every step's MoE counters recorded (rows = rows in that step). */
function recording(model: NativeModel, log: { rows: number; decode: boolean; moe: NativeMoeStepStats }[]): NativeModel {
  return new Proxy(model, {
    get(t, p) {
      if (p === 'step')
        return async (plan: NativeStepPlan) => {
          const r = await t.step(plan);
          log.push({ rows: plan.rows.length, decode: plan.rows.every((x) => x.contextLen > 0 && x.tokens.length === 1), moe: r.timings.moe! });
          return r;
        };
      const v = Reflect.get(t, p) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(t) : v;
    },
  });
}

async function checkCase(m: NativeModel, fx: VlmFixture, c: VlmCase, images: SeqImage[], tol: number): Promise<number> {
  const out = (await runVlmSequences(m, [specOf(c, images, { wantLogits: true })])).get(c.name)!;
  expect(out.errors).toEqual([]);
  const ref = readF32(fx.dir, c.logits);
  const rel = expectWithin(out.logits!.subarray(out.logits!.length - ref.length), ref, tol, `${fx.name} ${c.name} logits`);
  expect(out.tokens, `${fx.name} ${c.name} greedy`).toEqual(c.greedy);
  return rel;
}

const report: string[] = [];
afterAll(() => {
  if (report.length) console.log(`qwen3-vl-moe summary:\n${report.join('\n')}`);
});

describe.each(VARIANTS)('%s', (name) => {
  const fx = loadVlmFixture(name);
  const tol = name.endsWith('-f32') ? 1e-4 : 1e-3;
  let model: NativeModel;
  beforeAll(() => {
    model = open(fx.dir);
  });
  afterAll(() => model.close());

  it('loads as the qwen3_vl_moe family with the Qwen3-VL tower', () => {
    const info = model.info();
    expect(info.family).toBe('qwen3_vl_moe');
    expect(info.vision?.family).toBe('qwen3_vl');
    expect(info.vision?.deepstackLayers).toBe(1);
    expect(info.mropeSections).toEqual([2, 3, 3]);
  });

  it('logits and 16 greedy tokens match transformers (stored features and encodeImage output)', async () => {
    let worst = 0;
    for (const c of fx.cases) {
      worst = Math.max(worst, await checkCase(model, fx, c, storedImages(fx.dir, c), tol));
      const encoded: SeqImage[] = [];
      for (const im of c.images) {
        const out = await model.encodeImage({ pixels: readF32(fx.dir, im.pixel_values), grid: im.grid });
        const ref = readF32(fx.dir, im.features);
        expect(maxAbsDiff(out.embeddings, ref), `${c.name} features`).toBeLessThanOrEqual(1e-4 * Math.max(1, maxAbs(ref)));
        encoded.push({ offset: im.placeholder_offset, tokens: out.tokens, data: out.embeddings, deepstack: out.deepstack });
      }
      if (encoded.length) worst = Math.max(worst, await checkCase(model, fx, c, encoded, tol));
    }
    report.push(`${name}: logits max |diff|/max(1,|logit|) = ${worst.toExponential(2)} (tolerance ${tol})`);
  });

  for (const precision of ['exact', 'fast'] as const) {
    it(`batch invariance: text, one-image and two-image rows together and joined mid-stream (${precision})`, async () => {
      const m = precision === 'exact' ? model : open(fx.dir, precision);
      try {
        const cases = [...fx.cases].sort((a, b) => b.images.length - a.images.length);
        await expectBatchInvariant(m, cases, (c, extra) => specOf(c, storedImages(fx.dir, c), extra), imageChunks, precision === 'exact', 1);
      } finally {
        if (m !== model) m.close();
      }
    });
  }

  it('each active expert is read once per step: 8 decode rows share expert passes, 1 row reads exactly top-k', async () => {
    // Eight sequences: the three cases and five text prompts cut from the two-image prompt's text tail.
    const text = fx.cases.find((c) => c.images.length === 0)!;
    const specs: VlmSeqSpec[] = fx.cases.map((c) => specOf(c, storedImages(fx.dir, c), { maxTokens: 6 }));
    for (let i = 0; i < 5; i++) specs.push({ id: `t${i}`, prompt: text.input_ids.slice(0, text.input_ids.length - 1 - i), images: [], maxTokens: 6 });
    const q4 = name.endsWith('-q4');
    // Bytes one expert pass reads: gate + up [FFN, HIDDEN] and down [HIDDEN, FFN]; q4: 4-bit codes + bf16 scales/biases per 32.
    const perMatrix = q4 ? (FFN * HIDDEN) / 2 + 2 * 2 * ((FFN * HIDDEN) / 32) : FFN * HIDDEN * 4;
    const perExpert = 3 * perMatrix;
    const log: { rows: number; decode: boolean; moe: NativeMoeStepStats }[] = [];
    await runVlmSequences(recording(model, log), specs);
    const batched = log.filter((s) => s.decode && s.rows === 8);
    expect(batched.length).toBeGreaterThan(0);
    for (const s of log) {
      expect(s.moe.expertRuns, 'one pass per active expert').toBe(s.moe.activeExperts);
      expect(s.moe.expertBytes).toBe(s.moe.expertRuns * perExpert);
      expect(s.moe.expertRuns).toBeLessThanOrEqual(MOE_LAYERS * EXPERTS);
    }
    for (const s of batched) {
      expect(s.moe.routedRows).toBe(8 * TOP_K * MOE_LAYERS);
      expect(s.moe.expertRuns).toBeLessThan(s.moe.routedRows); // 32 routed rows, at most 16 distinct experts
    }
    // One decode row alone: exactly its top-k experts in each MoE layer.
    const solo: { rows: number; decode: boolean; moe: NativeMoeStepStats }[] = [];
    await runVlmSequences(recording(model, solo), [{ id: 'solo', prompt: text.input_ids, images: [], maxTokens: 3 }]);
    for (const s of solo.filter((x) => x.decode)) {
      expect(s.moe.expertRuns).toBe(TOP_K * MOE_LAYERS);
      expect(s.moe.expertBytes).toBe(TOP_K * MOE_LAYERS * perExpert);
    }
    const mean = batched.reduce((a, s) => a + s.moe.expertBytes, 0) / batched.length;
    report.push(`${name}: expert bytes per decode step: ${TOP_K * MOE_LAYERS * perExpert} at 1 row, ${mean.toFixed(0)} at 8 rows (per-token reading would be ${8 * TOP_K * MOE_LAYERS * perExpert})`);
  });
});

// Hub files: the fused experts stored transposed ([E, H, 2I] + [E, I, H], gate = first I), and Qwen3-MoE
// text checkpoints with one tensor per expert. Here H == 2I, so gate_up alone cannot tell the layouts apart.
describe.runIf(VARIANTS.includes('qwen3_vl_moe-f32'))('expert layouts of hub files', () => {
  const fx = loadVlmFixture('qwen3_vl_moe-f32');
  const temps: string[] = [];
  afterAll(() => {
    for (const t of temps) rmSync(t, { recursive: true, force: true });
  });
  type Cfg = Record<string, unknown>;
  const f32 = (t: RawTensor) => new Float32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength));
  const raw = (shape: number[], a: Float32Array): RawTensor => ({ dtype: 'F32', shape, data: Buffer.from(a.buffer) });
  /** [E, a, b] -> [E, b, a] */
  function transpose(t: RawTensor): RawTensor {
    const [E, a, b] = t.shape as [number, number, number];
    const src = f32(t);
    const dst = new Float32Array(src.length);
    for (let e = 0; e < E; e++) for (let i = 0; i < a; i++) for (let j = 0; j < b; j++) dst[e * a * b + j * a + i] = src[e * a * b + i * b + j]!;
    return raw([E, b, a], dst);
  }
  function write(tensors: Map<string, RawTensor>, config: Cfg): string {
    const dst = mkdtempSync(join(tmpdir(), 'rapid-qwen3-moe-'));
    temps.push(dst);
    writeSafetensors(join(dst, 'model.safetensors'), tensors);
    writeFileSync(join(dst, 'config.json'), JSON.stringify(config));
    return dst;
  }
  const config = JSON.parse(readFileSync(join(fx.dir, 'config.json'), 'utf8')) as Cfg;
  const tensors = readSafetensors(join(fx.dir, 'model.safetensors'));

  it('transposed hub experts ([E, H, 2I] + [E, I, H]) give the same logits and tokens', async () => {
    const hub = new Map([...tensors].map(([k, v]) => [k, /mlp\.experts\.(gate_up|down)_proj$/.test(k) ? transpose(v) : v]));
    expect(hub.get('model.language_model.layers.0.mlp.experts.down_proj')!.shape).toEqual([EXPERTS, FFN, HIDDEN]);
    const m = open(write(hub, config));
    try {
      for (const c of fx.cases) await checkCase(m, fx, c, storedImages(fx.dir, c), 1e-4);
    } finally {
      m.close();
    }
  });

  // mRoPE with T = H = W is 1-D RoPE: a text prompt on the VLM equals its text weights run as Qwen3-MoE.
  it('the text weights as Qwen3MoeForCausalLM with per-expert tensors give the text case exactly', async () => {
    const text = new Map<string, RawTensor>();
    for (const [k, v] of tensors) {
      if (!k.startsWith('model.language_model.') && k !== 'lm_head.weight') continue;
      const key = k.replace(/^model\.language_model\./, 'model.');
      const fused = /^(.*\.mlp\.experts)\.(gate_up|down)_proj$/.exec(key);
      if (!fused) {
        text.set(key, v);
        continue;
      }
      const [E, a, b] = v.shape as [number, number, number];
      const src = f32(v);
      for (let e = 0; e < E; e++) {
        const mat = src.subarray(e * a * b, (e + 1) * a * b);
        if (fused[2] === 'down') text.set(`${fused[1]}.${e}.down_proj.weight`, raw([a, b], mat.slice()));
        else {
          text.set(`${fused[1]}.${e}.gate_proj.weight`, raw([a / 2, b], mat.slice(0, (a / 2) * b)));
          text.set(`${fused[1]}.${e}.up_proj.weight`, raw([a / 2, b], mat.slice((a / 2) * b)));
        }
      }
    }
    const { rope_parameters: rp, ...tc } = config.text_config as Cfg & { rope_parameters: Cfg };
    const cfg = { ...tc, rope_theta: rp.rope_theta, architectures: ['Qwen3MoeForCausalLM'], model_type: 'qwen3_moe', norm_topk_prob: true, tie_word_embeddings: false };
    const m = open(write(text, cfg));
    try {
      expect(m.info().family).toBe('qwen3_moe');
      expect(m.info().vision).toBeUndefined();
      await expectTextCase(m, fx);
    } finally {
      m.close();
    }
  });

  it('experts whose shapes match neither layout fail to load, naming the module', () => {
    const bad = new Map(tensors);
    const k = 'model.language_model.layers.2.mlp.experts.down_proj';
    const t = bad.get(k)!;
    bad.set(k, { ...t, shape: [EXPERTS * 2, FFN / 2, HIDDEN] });
    expect(() => open(write(bad, config))).toThrow(/layers\.2\.mlp\.experts/);
  });
});
