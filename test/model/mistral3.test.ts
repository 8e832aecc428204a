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
import {
  chunksAt, expectBatchInvariant, expectTextCase, expectWithin, loadVlmFixture, maxAbs, readF32, runVlmSequences, vlmFixtureNames,
  type SeqImage, type VlmCase, type VlmFixture, type VlmSeqSpec,
} from '../helpers/vlm.js';

const IMG = 10; // [IMG]; [IMG_BREAK] 12 and [IMG_END] 13 are ordinary text tokens
const names = vlmFixtureNames().filter((n) => n.startsWith('mistral3-'));
const report: string[] = [];
afterAll(() => {
  if (report.length) console.log(`mistral3 summary:\n${report.join('\n')}`);
});

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
          expect(out.tokens).toBe(im.tokens);
          worst = Math.max(worst, expectWithin(out.embeddings, readF32(fx.dir, im.features), 1e-4, `${c.name} image ${i} features`));
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
          worst = Math.max(worst, expectWithin(out.logits!.subarray(out.logits!.length - ref.length), ref, logitTol, `${c.name} logits`));
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
          // Joined mid-stream, prefilled in chunks cut at every span edge (a span is never split) and inside the
          // text, so later chunks start past position 64 where the Llama-4 scale steps up.
          const chunks = (c: VlmCase) =>
            chunksAt([...storedImages(fx, c).flatMap((im) => [im.offset, im.offset + im.span!]), ...(c.images.length === 0 ? [30, 70] : [])], c.input_ids.length);
          await expectBatchInvariant(m, cases, (c, extra) => specOf(c, storedImages(fx, c), extra), chunks, precision === 'exact');
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
        await expectTextCase(m, fx);
      } finally {
        m.close();
      }
    } finally {
      rmSync(dst, { recursive: true, force: true });
    }
  });
});
