// Pixtral (Mistral 3) preprocessing and prompt expansion against transformers 5.18's PixtralProcessor
// (fixtures: scripts/fixtures/vision/gen_mistral3.py): resize sizes, input_ids with [IMG]/[IMG_BREAK]/[IMG_END]
// rows, bit-exact pixel_values, and the engine's view of a span whose breaks are text (embeddings only at the
// [IMG] offsets, the whole span never split across prefill chunks).
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { toImagePrompt } from '../../src/engine/image-prompt.js';
import { checkMultimodal, chunkEnd, rowEmbeds } from '../../src/engine/multimodal.js';
import { ChatTemplate, type ChatMessage, selectChatTemplate } from '../../src/template/chat-template.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { decodeImage } from '../../src/vision/decode-image.js';
import { expandPixtralImageIds } from '../../src/vision/expand-prompt.js';
import { pixtralPreprocess, pixtralResizeSize, type PixtralImageConfig } from '../../src/vision/pixtral-image-processor.js';
import { VisionProcessor } from '../../src/vision/processor.js';

const root = resolve(import.meta.dirname, '..', 'fixtures', 'vlm');
const dir = join(root, 'mistral3-f32');

interface RefCase {
  name: string;
  hf_messages: ChatMessage[];
  prompt_text: string;
  input_ids: number[];
  images: { file: string; grid: number[]; placeholder_offset: number; span_length: number; tokens: number; resized_hw: number[]; pixel_values: string }[];
}

describe('pixtralResizeSize', () => {
  // [h, w, longest_edge, patch * merge] -> transformers get_resize_output_image_size (computed with 5.18).
  const table: [number, number, number, number, number, number][] = [
    [60, 90, 100, 8, 64, 96],
    [100, 64, 100, 8, 104, 64],
    [150, 200, 100, 8, 80, 104],
    [1, 1, 100, 8, 8, 8],
    [3000, 20, 1540, 28, 1540, 28],
    [1024, 768, 1540, 28, 1036, 784],
    [2000, 1999, 1540, 28, 1540, 1540],
    [37, 1541, 1540, 28, 56, 1540],
    [5, 500, 64, 16, 0, 64],
  ];
  it.each(table)('%i x %i (longest %i, unit %i) -> %i x %i', (h, w, l, p, eh, ew) => {
    expect(pixtralResizeSize(h, w, l, p)).toEqual([eh, ew]);
  });

  it('an image scaled to zero rows is a client error, not a crash', () => {
    const cfg: PixtralImageConfig = {
      patchSize: 8, mergeSize: 2, longestEdge: 64, doResize: true, resample: 'bicubic',
      norm: { doRescale: true, rescaleFactor: 1 / 255, doNormalize: true, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5] },
    };
    expect(() => pixtralPreprocess(cfg, { width: 500, height: 5, data: new Uint8Array(500 * 5 * 3) })).toThrow(/16-pixel cells/);
  });
});

describe('expandPixtralImageIds', () => {
  it('writes rows of [IMG] x cols + [IMG_BREAK], the last break as [IMG_END], and the [IMG] offsets', () => {
    const ex = expandPixtralImageIds([1, 3, 10, 7, 10, 4], { image: 10, rowBreak: 12, end: 13 }, [{ rows: 2, cols: 3 }, { rows: 1, cols: 1 }]);
    expect(ex.ids).toEqual([1, 3, 10, 10, 10, 12, 10, 10, 10, 13, 7, 10, 13, 4]);
    expect(ex.offsets).toEqual([2, 11]);
    expect(ex.spans).toEqual([8, 2]);
    expect(Array.from(ex.embedAt[0]!)).toEqual([0, 1, 2, 4, 5, 6]);
    expect(Array.from(ex.embedAt[1]!)).toEqual([0]);
  });
  it('a placeholder count that differs from the images is a client error', () => {
    expect(() => expandPixtralImageIds([10, 10], { image: 10, rowBreak: 12, end: 13 }, [{ rows: 1, cols: 1 }])).toThrow(/2 image placeholders but 1 image was sent/);
  });
});

describe.runIf(existsSync(join(dir, 'reference.json')))('VisionProcessor on the Mistral 3 fixture', () => {
  const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { cases: RefCase[] };
  for (const c of ref.cases) {
    it(`${c.name}: prompt text, input_ids, spans and pixel_values exactly as the HF processor`, async () => {
      const text = loadTokenizerDir(dir);
      const processor = VisionProcessor.load(dir, text)!;
      expect(processor.family).toBe('mistral3');
      expect(processor.imageTokenId).toBe(10);
      expect(processor.placeholder).toBe('[IMG]');
      const picked = selectChatTemplate(text.chatTemplates)!;
      const rendered = new ChatTemplate(picked.source, picked.name).render({ messages: c.hf_messages, addGenerationPrompt: true, specialTokens: text.specialTokens });
      expect(rendered).toBe(c.prompt_text);
      const images = [];
      for (const im of c.images) {
        const decoded = await decodeImage(new Uint8Array(readFileSync(join(root, 'images', im.file))));
        const prepared = processor.prepareImage(decoded);
        // The preprocessing worker pool gives the same bytes for the Pixtral spec.
        const off = await processor.prepareImageOffThread(decoded);
        expect(off.input.grid).toEqual(prepared.input.grid);
        expect(Buffer.from(off.input.pixels.buffer).equals(Buffer.from(prepared.input.pixels.buffer))).toBe(true);
        images.push(prepared);
      }
      const prompt = processor.buildPrompt(rendered, images);
      expect(prompt.promptIds).toEqual(c.input_ids);
      expect(prompt.positions).toBeUndefined();
      c.images.forEach((im, i) => {
        const got = prompt.images[i]!;
        expect(got.offset).toBe(im.placeholder_offset);
        expect(got.spanLength).toBe(im.span_length);
        expect(got.tokens).toBe(im.tokens);
        expect(got.input.grid).toEqual(im.grid);
        expect(got.input.grid.slice(1).map((g) => g * 4)).toEqual(im.resized_hw);
        // embedAt lands exactly on the [IMG] ids of the span; the span ends with [IMG_END].
        const at = Array.from(got.embedAt!);
        const imgs = c.input_ids.slice(im.placeholder_offset, im.placeholder_offset + im.span_length).flatMap((t, j) => (t === 10 ? [j] : []));
        expect(at).toEqual(imgs);
        expect(c.input_ids[im.placeholder_offset + im.span_length - 1]).toBe(13);
        const want = new Float32Array(new Uint8Array(readFileSync(join(dir, im.pixel_values))).buffer);
        expect(got.input.pixels.length).toBe(want.length);
        let maxDiff = 0;
        for (let j = 0; j < want.length; j++) maxDiff = Math.max(maxDiff, Math.abs(got.input.pixels[j]! - want[j]!));
        expect(maxDiff).toBe(0);
      });

      // The engine's view: spans cover the breaks; embeddings go to the [IMG] offsets only, in order.
      const ip = toImagePrompt(prompt);
      const spans = checkMultimodal(ip.multimodal, ip.promptIds.length, false, true);
      const hidden = 2;
      const embeddings = new Map(prompt.images.map((im, i) => {
        const data = new Float32Array(im.tokens * hidden);
        for (let r = 0; r < im.tokens; r++) data.set([i, r], r * hidden);
        return [i, { tokens: im.tokens, embeddings: data, ms: 0 }] as const;
      }));
      const whole = rowEmbeds(spans, embeddings, 0, ip.promptIds.length, hidden, false).embeds;
      const n = prompt.images.reduce((a, im) => a + im.tokens, 0);
      if (n === 0) {
        expect(whole).toBeUndefined();
        return;
      }
      expect(Array.from(whole!.offsets)).toEqual(ip.promptIds.flatMap((t, j) => (t === 10 ? [j] : [])));
      expect(Array.from(whole!.data)).toEqual(prompt.images.flatMap((im, i) => Array.from({ length: im.tokens }, (_, r) => [i, r]).flat()));
      // A chunk boundary falling inside a span moves before it (or after it when the span starts the chunk).
      for (const s of spans) {
        const mid = Math.floor((s.start + s.end) / 2);
        expect(chunkEnd(spans, 0, ip.promptIds.length, mid, 1 << 20, false)).toBe(s.start === 0 ? s.end : spans.find((x) => x.end > mid)!.start);
        // Rows starting at the span's first token and covering it whole carry its rows, offset to the chunk.
        const part = rowEmbeds(spans, embeddings, s.start, s.end - s.start, hidden, false).embeds!;
        expect(Array.from(part.offsets)).toEqual(Array.from(s.image.embedAt!));
      }
    });
  }
});

// Mistral-Small-3.1's processor files as published (PixtralProcessor: patch 14, merge 2; longest edge 1540):
// the processor's patch_size * spatial_merge_size (28) sets the cells, not the image processor's patch_size;
// without processor_config.json, config.json's vision patch_size and spatial_merge_size give the same.
describe.runIf(existsSync(join(dir, 'tokenizer.json')))('hub-shaped Mistral 3 processor configs', () => {
  const hubPre = {
    do_convert_rgb: true, do_normalize: true, do_rescale: true, do_resize: true, image_mean: [0.48145466, 0.4578275, 0.40821073],
    image_processor_type: 'PixtralImageProcessor', image_std: [0.26862954, 0.26130258, 0.27577711], patch_size: { height: 16, width: 16 },
    processor_class: 'PixtralProcessor', resample: 3, rescale_factor: 1 / 255, size: { longest_edge: 1540 },
  };
  const hubProc = { image_break_token: '[IMG_BREAK]', image_end_token: '[IMG_END]', image_token: '[IMG]', patch_size: 14, processor_class: 'PixtralProcessor', spatial_merge_size: 2 };
  const config = { model_type: 'mistral3', image_token_index: 10, spatial_merge_size: 2, vision_config: { model_type: 'pixtral', patch_size: 14 }, text_config: { model_type: 'mistral' } };
  for (const withProc of [true, false]) {
    it(`${withProc ? 'with' : 'without'} processor_config.json: a 2000x1500 image -> 1540x1155 -> 1540x1176, 55x42 [IMG]`, () => {
      const d = mkdtempSync(join(tmpdir(), 'rapid-pixtral-hub-'));
      try {
        for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(dir, f), join(d, f));
        writeFileSync(join(d, 'config.json'), JSON.stringify(config));
        writeFileSync(join(d, 'preprocessor_config.json'), JSON.stringify(hubPre));
        if (withProc) writeFileSync(join(d, 'processor_config.json'), JSON.stringify(hubProc));
        const p = VisionProcessor.load(d, loadTokenizerDir(d))!;
        expect(p.preprocessSpec).toMatchObject({ kind: 'pixtral', image: { patchSize: 14, mergeSize: 2, longestEdge: 1540, resample: 'bicubic' } });
        const im = p.prepareImage({ width: 2000, height: 1500, data: new Uint8Array(2000 * 1500 * 3).fill(128) });
        expect(im.input.grid).toEqual([1, 84, 110]);
        expect(im.tokens).toBe(42 * 55);
        expect(im.input.pixels.length).toBe(3 * 1176 * 1540);
      } finally {
        rmSync(d, { recursive: true, force: true });
      }
    });
  }
});
