// The Gemma 4 text lane against transformers (fixtures test/fixtures/vlm/gemma4-*, scripts/fixtures/vision/
// gen_gemma4.py): e2b-like (PLE, KV sharing, double-wide MLP) and 26B-A4B-like (MoE beside the dense MLP,
// K-eq-V full layers) checkpoints, f32 HF layout and 4-bit MLX layout. The image features are the STORED
// ones (the tower is tested in gemma4-vision.test.ts), spliced at the placeholders with the image blocks
// bidirectional (the model applies them on sliding layers only). Tolerances (exact precision): logits at
// the stored prompt positions max |diff| <= 1e-4 * max(1, max|logit|) for f32, 1e-3 * max(1, max|logit|)
// for 4-bit (the reference runs on the dequantized weights); 16 greedy tokens identical.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NativeModel } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { maxAbsDiff } from '../helpers/fixtures.js';
import { readSafetensors, writeSafetensors } from '../helpers/safetensors.js';
import {
  expectBatchInvariant, expectWithin, imageChunks, logitsAt, maxAbs, readF32, runVlmSequences, storedImages, type SeqImage, VLM_ROOT,
  type VlmSeqSpec, vlmFixtureNames,
} from '../helpers/vlm.js';

interface G4Image {
  features: string;
  placeholder_offset: number;
  tokens: number;
}
interface G4Case {
  name: string;
  input_ids: number[];
  images: G4Image[];
  logits: string;
  logits_positions: number[];
  greedy: number[];
}

const names = vlmFixtureNames().filter((n) => n.startsWith('gemma4-'));
const report: string[] = [];
afterAll(() => {
  if (report.length) console.log(`gemma4 text lane summary:\n${report.join('\n')}`);
});

const spec = (dir: string, c: G4Case, extra: Partial<VlmSeqSpec> = {}): VlmSeqSpec => ({
  id: c.name,
  prompt: c.input_ids,
  images: storedImages(dir, c),
  bidirectional: true,
  maxTokens: c.greedy.length,
  ...extra,
});

describe.runIf(names.length > 0).each(names)('%s', (name) => {
  const dir = join(VLM_ROOT, name);
  const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { cases: G4Case[] };
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { text_config: Record<string, unknown> };
  const logitTol = name.endsWith('-f32') ? 1e-4 : 1e-3;
  let model: NativeModel;
  beforeAll(() => {
    model = addon().loadModel(dir, { threads: 2, kvCacheBytes: 16 << 20, precision: 'exact' });
  });
  afterAll(() => model.close());

  it('loads as the gemma4 family with its tower', () => {
    const info = model.info();
    expect(info.family).toBe('gemma4');
    expect(info.vocabSize).toBe(1024);
    expect(info.mropeSections).toBeUndefined();
    expect(info.vision).toBeDefined();
  });

  it('allocates KV only for the layers that own a cache', () => {
    // KV-shared layers read their source layer's cache; K-eq-V / global layers have their own head shapes.
    const t = cfg.text_config as { layer_types: string[]; num_kv_shared_layers: number; head_dim: number; num_key_value_heads: number;
      per_layer_config?: Record<string, { head_dim?: number; num_key_value_heads?: number }> };
    const owners = t.layer_types.length - t.num_kv_shared_layers;
    let floatsPerToken = 0;
    for (let l = 0; l < owners; l++) {
      const o = t.per_layer_config?.[String(l)] ?? {};
      floatsPerToken += 2 * (o.num_key_value_heads ?? t.num_key_value_heads) * (o.head_dim ?? t.head_dim);
    }
    const info = model.info();
    expect(info.numBlocks).toBe(Math.floor((16 << 20) / (info.blockSize * floatsPerToken * 4)));
  });

  it('logits at every stored prompt position and 16 greedy tokens match transformers', async () => {
    let worst = 0;
    for (const c of ref.cases) {
      const out = (await runVlmSequences(model, [spec(dir, c, { wantLogits: true })])).get(c.name)!;
      expect(out.errors).toEqual([]);
      const V = model.info().vocabSize;
      worst = Math.max(worst, expectWithin(logitsAt(out.logits!, c.logits_positions, V), readF32(dir, c.logits), logitTol, `${c.name} logits`));
      expect(out.tokens, `${c.name} greedy`).toEqual(c.greedy);
    }
    report.push(`${name} logits: max |diff|/max(1,|logit|) = ${worst.toExponential(2)}`);
  });

  it('image blocks attend both ways on sliding layers only', async () => {
    // With the block, an image token's logits depend on a LATER token of its image; without it they cannot.
    const c = ref.cases.find((x) => x.images.length === 1)!;
    const im = c.images[0]!;
    const V = model.info().vocabSize;
    const H = model.info().hiddenSize;
    const base = storedImages(dir, c);
    const perturbed = base.map((s) => ({ ...s, data: s.data.slice() }));
    for (let i = (im.tokens - 1) * H; i < im.tokens * H; i++) perturbed[0]!.data[i]! += 1;
    const first = async (images: SeqImage[], bidirectional: boolean) => {
      const out = (await runVlmSequences(model, [{ ...spec(dir, c), images, bidirectional, maxTokens: 1, wantLogits: true }])).get(c.name)!;
      expect(out.errors).toEqual([]);
      return out.logits!.subarray(im.placeholder_offset * V, (im.placeholder_offset + 1) * V);
    };
    expect(maxAbsDiff(await first(base, true), await first(perturbed, true))).toBeGreaterThan(1e-3);
    expect(maxAbsDiff(await first(base, false), await first(perturbed, false))).toBe(0);
  });

  it.runIf(cfg.text_config.enable_moe_block === true)('reports the expert work of a step', async () => {
    const c = ref.cases.find((x) => x.images.length === 0)!;
    const n = c.input_ids.length;
    const res = await model.step({
      rows: [{
        requestId: 'm', tokens: Int32Array.from(c.input_ids), positions: Int32Array.from(c.input_ids, (_, i) => i),
        blockTable: Int32Array.from({ length: Math.ceil(n / model.info().blockSize) }, (_, i) => i), contextLen: 0,
      }],
    });
    const t = res.timings.moe!;
    expect(t, 'moe stats').toBeDefined();
    const layers = cfg.text_config.num_hidden_layers as number;
    const experts = cfg.text_config.num_experts as number;
    // Grouped by expert: every layer reads each active expert once, never more than all of them.
    expect(t.expertRuns).toBeGreaterThanOrEqual(layers);
    expect(t.expertRuns).toBeLessThanOrEqual(layers * experts);
    expect(t.expertRuns).toBe(t.activeExperts);
  });

  describe('batch invariance', () => {
    const cases = [...ref.cases].sort((a, b) => b.images.length - a.images.length);
    for (const precision of ['exact', 'fast'] as const) {
      it(`two-image, one-image and text rows in one step and joined mid-stream (${precision})`, async () => {
        const m = precision === 'exact' ? model : addon().loadModel(dir, { threads: 2, kvCacheBytes: 16 << 20, precision });
        try {
          // Joined mid-stream, prefilled in chunks cut at image boundaries (never inside an image).
          await expectBatchInvariant(m, cases, (c, extra) => spec(dir, c, extra), imageChunks, precision === 'exact');
        } finally {
          if (m !== model) m.close();
        }
      });
    }
  });
});

// Config and key layouts beyond the fixtures' own: the text weights alone as Gemma4ForCausalLM (model.* keys, flat
// config), and a hub-style config (global_head_dim / num_global_key_value_heads instead of transformers 5.18's
// resolved per_layer_config). Both must give the fixture's text-case logits and tokens.
describe('Gemma 4 checkpoint layouts', () => {
  const temps: string[] = [];
  afterAll(() => {
    for (const t of temps) rmSync(t, { recursive: true, force: true });
  });
  type Cfg = Record<string, unknown>;
  function variant(src: string, rename: (k: string) => string | null, config: (c: Cfg) => Cfg): string {
    const dst = mkdtempSync(join(tmpdir(), 'rapid-gemma4-layout-'));
    temps.push(dst);
    const t = readSafetensors(join(src, 'model.safetensors'));
    const kept = [...t].flatMap(([k, v]) => {
      const n = rename(k);
      return n === null ? [] : [[n, v] as const];
    });
    writeSafetensors(join(dst, 'model.safetensors'), new Map(kept));
    writeFileSync(join(dst, 'config.json'), JSON.stringify(config(JSON.parse(readFileSync(join(src, 'config.json'), 'utf8')) as Cfg)));
    return dst;
  }
  async function sameAsText(name: string, dir: string, family: string): Promise<void> {
    const src = join(VLM_ROOT, name);
    const ref = JSON.parse(readFileSync(join(src, 'reference.json'), 'utf8')) as { cases: G4Case[] };
    const c = ref.cases.find((x) => x.images.length === 0)!;
    const m = addon().loadModel(dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
    try {
      expect(m.info().family).toBe(family);
      const out = (await runVlmSequences(m, [{ id: 't', prompt: c.input_ids, images: [], maxTokens: 16, wantLogits: true }])).get('t')!;
      expect(out.errors).toEqual([]);
      const want = readF32(src, c.logits);
      const V = m.info().vocabSize;
      const got = new Float32Array(c.logits_positions.length * V);
      c.logits_positions.forEach((p, i) => got.set(out.logits!.subarray(p * V, (p + 1) * V), i * V));
      expect(maxAbsDiff(got, want)).toBeLessThanOrEqual(1e-4 * Math.max(1, maxAbs(want)));
      expect(out.tokens).toEqual(c.greedy);
    } finally {
      m.close();
    }
  }

  it.runIf(names.includes('gemma4-e-f32'))('the text weights alone load as Gemma4ForCausalLM', async () => {
    const dir = variant(
      join(VLM_ROOT, 'gemma4-e-f32'),
      (k) => (k.startsWith('model.language_model.') ? `model.${k.slice('model.language_model.'.length)}` : null),
      (c) => ({ ...(c.text_config as Cfg), architectures: ['Gemma4ForCausalLM'], model_type: 'gemma4_text' }),
    );
    await sameAsText('gemma4-e-f32', dir, 'gemma4');
  });

  it.runIf(names.includes('gemma4-moe-f32'))('a hub-style config (global_head_dim, num_global_key_value_heads)', async () => {
    const dir = variant(join(VLM_ROOT, 'gemma4-moe-f32'), (k) => k, (c) => {
      const { per_layer_config: plc, ...text } = c.text_config as Cfg & { per_layer_config: Record<string, { head_dim: number; num_key_value_heads?: number }> };
      const full = Object.values(plc)[0]!;
      return { ...c, text_config: { ...text, global_head_dim: full.head_dim, num_global_key_value_heads: full.num_key_value_heads } };
    });
    await sameAsText('gemma4-moe-f32', dir, 'gemma4');
  });
});
