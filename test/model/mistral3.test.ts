// Mistral 3 / Ministral 3 against transformers (fixtures from scripts/fixtures/vision/gen_mistral3.py): the
// Pixtral tower + projector, the Ministral 3 text lane (YaRN, Llama-4 query scaling past
// original_max_position_embeddings = 64) with image rows only at the [IMG] tokens ([IMG_BREAK]/[IMG_END] are
// text), 16 greedy tokens, and batch invariance with image and text neighbours. Tolerances (exact precision):
// features max |diff| <= 1e-4 * max(1, max|f|); logits max |diff| <= 1e-4 * max(1, max|logit|) for f32 and 1e-3
// for the 4-bit checkpoint (the text parity tests' bounds); greedy tokens identical.
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NativeModel } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { maxAbsDiff } from '../helpers/fixtures.js';
import { BlockAllocator } from '../helpers/runner.js';
import { loadVlmFixture, readF32, runVlmSequences, vlmFixtureNames, type SeqImage, type VlmCase, type VlmFixture, type VlmSeqSpec } from '../helpers/vlm.js';

const IMG = 10; // [IMG]; [IMG_BREAK] 12 and [IMG_END] 13 are ordinary text tokens
const names = vlmFixtureNames().filter((n) => n.startsWith('mistral3-'));
const report: string[] = [];
afterAll(() => {
  if (report.length) console.log(`mistral3 summary:\n${report.join('\n')}`);
});

const maxAbs = (a: Float32Array) => a.reduce((m, x) => Math.max(m, Math.abs(x)), 0);

interface PixtralRef {
  placeholder_offset: number;
  span_length: number;
  tokens: number;
}

/** The image's span and the offsets inside it of its [IMG] tokens (the embedding rows), from input_ids. */
function spanOf(c: VlmCase, i: number): { offset: number; span: number; at: number[] } {
  const im = c.images[i] as unknown as PixtralRef;
  const at: number[] = [];
  for (let j = 0; j < im.span_length; j++) if (c.input_ids[im.placeholder_offset + j] === IMG) at.push(j);
  expect(at.length).toBe(im.tokens);
  return { offset: im.placeholder_offset, span: im.span_length, at };
}

function storedImages(fx: VlmFixture, c: VlmCase): SeqImage[] {
  return c.images.map((im, i) => ({ ...spanOf(c, i), tokens: im.tokens, data: readF32(fx.dir, im.features) }));
}

function specOf(c: VlmCase, images: SeqImage[], extra: Partial<VlmSeqSpec> = {}): VlmSeqSpec {
  return { id: c.name, prompt: c.input_ids, images, maxTokens: c.greedy.length, ...extra };
}

describe.runIf(names.length > 0)('Mistral 3 fixtures', () => {
  describe.each(names)('%s', (name) => {
    const fx = loadVlmFixture(name);
    const logitTol = name.endsWith('-f32') ? 1e-4 : 1e-3;
    let model: NativeModel;
    const encoded = new Map<string, SeqImage[]>();
    beforeAll(() => {
      model = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 16 << 20, precision: 'exact' });
    });
    afterAll(() => model.close());

    it('loads as the mistral3 family with the Pixtral tower and 1-D positions', () => {
      const info = model.info();
      expect(info.family).toBe('mistral3');
      expect(info.vision?.family).toBe('mistral3');
      expect(info.mropeSections).toBeUndefined();
      expect(info.vision!.deepstackLayers).toBe(0);
      if (name.endsWith('-q4')) expect(info.vision!.quantization).toBe('none'); // mlx-vlm keeps towers bf16
    });

    it('encodeImage(pixel_values) matches the stored features', async () => {
      let worst = 0;
      for (const c of fx.cases) {
        const imgs: SeqImage[] = [];
        for (const [i, im] of c.images.entries()) {
          const out = await model.encodeImage({ pixels: readF32(fx.dir, im.pixel_values), grid: im.grid });
          const ref = readF32(fx.dir, im.features);
          expect(out.tokens).toBe(im.tokens);
          const scale = Math.max(1, maxAbs(ref));
          const d = maxAbsDiff(out.embeddings, ref);
          worst = Math.max(worst, d / scale);
          expect(d, `${c.name} image ${i} features`).toBeLessThanOrEqual(1e-4 * scale);
          imgs.push({ ...spanOf(c, i), tokens: out.tokens, data: out.embeddings });
        }
        encoded.set(c.name, imgs);
      }
      report.push(`${name} features: max |diff|/max(1,|f|) = ${worst.toExponential(2)}`);
    });

    for (const source of ['stored features', 'encodeImage output'] as const) {
      it(`logits and 16 greedy tokens match transformers for text, one and two images (${source})`, async () => {
        let worst = 0;
        for (const c of fx.cases) {
          const images = source === 'stored features' ? storedImages(fx, c) : encoded.get(c.name);
          expect(images, 'encodeImage ran first').toBeDefined();
          const out = (await runVlmSequences(model, [specOf(c, images!, { wantLogits: true })])).get(c.name)!;
          expect(out.errors).toEqual([]);
          const ref = readF32(fx.dir, c.logits);
          const got = out.logits!.subarray(out.logits!.length - ref.length);
          const scale = Math.max(1, maxAbs(ref));
          const d = maxAbsDiff(got, ref);
          worst = Math.max(worst, d / scale);
          expect(d, `${c.name} logits`).toBeLessThanOrEqual(logitTol * scale);
          expect(out.tokens, `${c.name} greedy`).toEqual(c.greedy);
        }
        report.push(`${name} logits (${source}): max |diff|/max(1,|logit|) = ${worst.toExponential(2)}`);
      });
    }

    for (const precision of ['exact', 'fast'] as const) {
      it(`two-image, one-image and text rows in one step and joined mid-stream (${precision})`, async () => {
        const m = precision === 'exact' ? model : addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 16 << 20, precision });
        const cases = [...fx.cases].sort((a, b) => b.images.length - a.images.length);
        try {
          const solo = new Map<string, number[]>();
          for (const c of cases) solo.set(c.name, (await runVlmSequences(m, [specOf(c, storedImages(fx, c))])).get(c.name)!.tokens);
          if (precision === 'exact') for (const c of cases) expect(solo.get(c.name), c.name).toEqual(c.greedy);
          const together = await runVlmSequences(m, cases.map((c) => specOf(c, storedImages(fx, c))));
          for (const c of cases) expect(together.get(c.name)!.tokens, `${c.name} together`).toEqual(solo.get(c.name));
          // Joined mid-stream, prefilled in chunks cut at every span edge (a span is never split) and inside the
          // text, so later chunks start past position 64 where the Llama-4 scale steps up.
          const alloc = new BlockAllocator(m.info().blockSize, m.info().numBlocks);
          const staggered = await runVlmSequences(
            m,
            cases.map((c, i) => {
              const imgs = storedImages(fx, c);
              const cuts = imgs.flatMap((im) => [im.offset, im.offset + im.span!]);
              const text = c.images.length === 0 ? [30, 70] : [];
              const bounds = [...new Set([0, ...cuts, ...text, c.input_ids.length])].sort((a, b) => a - b);
              const chunks = bounds.slice(1).map((b, k) => b - bounds[k]!).filter((x) => x > 0);
              return specOf(c, imgs, { startStep: 2 * i, chunks });
            }),
            alloc,
          );
          for (const c of cases) expect(staggered.get(c.name)!.tokens, `${c.name} joined mid-stream`).toEqual(solo.get(c.name));
        } finally {
          if (m !== model) m.close();
        }
      });
    }
  });

  // The fixture crosses original_max_position_embeddings, so both YaRN and the Llama-4 query scaling move the
  // logits beyond tolerance: without either, the text case no longer matches transformers.
  describe.runIf(names.includes('mistral3-f32'))('YaRN and the Llama-4 query scaling are exercised', () => {
    const fx = loadVlmFixture('mistral3-f32');
    const temps: string[] = [];
    afterAll(() => {
      for (const t of temps) rmSync(t, { recursive: true, force: true });
    });
    type Cfg = Record<string, unknown> & { text_config: Record<string, unknown> & { rope_parameters: Record<string, unknown> } };
    function withRope(edit: (rp: Record<string, unknown>) => Record<string, unknown>): string {
      const dst = mkdtempSync(join(tmpdir(), 'rapid-mistral3-rope-'));
      temps.push(dst);
      symlinkSync(join(fx.dir, 'model.safetensors'), join(dst, 'model.safetensors'));
      const cfg = JSON.parse(readFileSync(join(fx.dir, 'config.json'), 'utf8')) as Cfg;
      cfg.text_config.rope_parameters = edit(cfg.text_config.rope_parameters);
      writeFileSync(join(dst, 'config.json'), JSON.stringify(cfg));
      return dst;
    }
    const variants: [string, (rp: Record<string, unknown>) => Record<string, unknown>][] = [
      ['plain RoPE instead of YaRN', (rp) => ({ rope_type: 'default', rope_theta: rp.rope_theta, llama_4_scaling_beta: rp.llama_4_scaling_beta, original_max_position_embeddings: rp.original_max_position_embeddings })],
      ['no Llama-4 query scaling', (rp) => ({ ...rp, llama_4_scaling_beta: 0 })],
    ];
    for (const [label, edit] of variants) {
      it(`${label}: the text logits leave tolerance`, async () => {
        const m = addon().loadModel(withRope(edit), { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
        try {
          const c = fx.cases.find((x) => x.images.length === 0)!;
          expect(c.input_ids.length).toBeGreaterThan(64);
          const out = (await runVlmSequences(m, [specOf(c, [], { wantLogits: true })])).get(c.name)!;
          const ref = readF32(fx.dir, c.logits);
          const d = maxAbsDiff(out.logits!.subarray(out.logits!.length - ref.length), ref);
          expect(d).toBeGreaterThan(100 * 1e-4 * Math.max(1, maxAbs(ref)));
        } finally {
          m.close();
        }
      });
    }
  });

  // The text lane alone (Ministral3ForCausalLM, text config at the top level) gives the VLM's text logits.
  it.runIf(names.includes('mistral3-f32'))('a text prompt on the VLM equals its weights loaded as Ministral3ForCausalLM', async () => {
    const fx = loadVlmFixture('mistral3-f32');
    const dst = mkdtempSync(join(tmpdir(), 'rapid-ministral3-text-'));
    try {
      symlinkSync(join(fx.dir, 'model.safetensors'), join(dst, 'model.safetensors'));
      const cfg = JSON.parse(readFileSync(join(fx.dir, 'config.json'), 'utf8')) as { text_config: Record<string, unknown> };
      writeFileSync(join(dst, 'config.json'), JSON.stringify({ ...cfg.text_config, architectures: ['Ministral3ForCausalLM'] }));
      const m = addon().loadModel(dst, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
      try {
        expect(m.info().vision).toBeUndefined();
        const c = fx.cases.find((x) => x.images.length === 0)!;
        const out = (await runVlmSequences(m, [specOf(c, [], { wantLogits: true })])).get(c.name)!;
        const ref = readF32(fx.dir, c.logits);
        expect(maxAbsDiff(out.logits!.subarray(out.logits!.length - ref.length), ref)).toBeLessThanOrEqual(1e-4 * Math.max(1, maxAbs(ref)));
        expect(out.tokens).toEqual(c.greedy);
      } finally {
        m.close();
      }
    } finally {
      rmSync(dst, { recursive: true, force: true });
    }
  });
});
