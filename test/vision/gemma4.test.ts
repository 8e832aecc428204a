// Gemma 4 image preprocessing against transformers 5.18's Gemma4ImageProcessorPil (fixture written by
// test/vision/fixtures/make_gemma4_fixture.py): the resize target for many sizes at every soft-token
// budget, and the real pixel_values rows (sha256 of the float32 bytes, uint8-exact rows) and grid/tokens
// for random, extreme-aspect, already-sized and the VLM fixture PNG images. Then, on the Gemma 4 VLM fixtures
// (test/fixtures/vlm/gemma4-*, the real Gemma4Processor): rendered prompt -> input_ids (from text and from
// ids), image offsets, mm_token_type_ids runs, bidirectional blocks and the stored pixel rows.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';

import { describe, expect, it } from 'vitest';

import { InvalidRequestError } from '../../src/errors/request-errors.js';
import { ChatTemplate, type ChatMessage, encodeChatPrompt, selectChatTemplate } from '../../src/template/chat-template.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { decodeImage, type DecodedImage } from '../../src/vision/decode-image.js';
import { gemma4ImageConfig, gemma4Preprocess, gemma4SoftTokensFor, gemma4TargetSize } from '../../src/vision/gemma4-image-processor.js';
import { prepareWithSpec } from '../../src/vision/prepare-image.js';
import { VisionProcessor } from '../../src/vision/processor.js';

interface Case {
  name: string;
  w: number;
  h: number;
  src: number | null; // byte offset of the RGB source in the bin, or null: decode the fixture PNG
  grid: [number, number, number];
  patches: number;
  tokens: number;
  sha256: string;
  rows: number; // byte offset of the kept uint8 rows
  rows_kept: number;
}

const dir = join(import.meta.dirname, 'fixtures');
const meta = JSON.parse(readFileSync(join(dir, 'gemma4.json'), 'utf8')) as {
  max_soft_tokens: number;
  cases: Case[];
  sizes: [number, number, number, number | null, number | null][];
};
const bin = gunzipSync(readFileSync(join(dir, 'gemma4.bin.gz')));
const images = join(import.meta.dirname, '..', 'fixtures', 'vlm', 'images');
const cfg70 = gemma4ImageConfig({ max_soft_tokens: 70 }, {}, 'test');

async function source(c: Case): Promise<DecodedImage> {
  if (c.src === null) return decodeImage(readFileSync(join(images, c.name)));
  return { width: c.w, height: c.h, data: new Uint8Array(bin.buffer, bin.byteOffset + c.src, c.w * c.h * 3) };
}

describe('Gemma 4 image processor = Gemma4ImageProcessorPil', () => {
  it('reads the processor config: defaults (280 tokens, patch 16, k 3, bicubic, no mean/std) and the budget', () => {
    const d = gemma4ImageConfig({}, {}, 'test');
    expect([d.maxSoftTokens, d.patchSize, d.poolingKernelSize, d.resample, d.norm.doNormalize]).toEqual([280, 16, 3, 'bicubic', false]);
    expect(gemma4ImageConfig({ max_soft_tokens: 1120 }, {}, 'test').maxSoftTokens).toBe(1120);
    expect(() => gemma4ImageConfig({ max_soft_tokens: 100 }, {}, 'test')).toThrow(/max_soft_tokens 100 is not one of 70, 140, 280, 560, 1120/);
  });

  it('resize target equals get_aspect_ratio_preserving_size at every budget', () => {
    expect(meta.sizes.length).toBeGreaterThan(200);
    for (const [budget, h, w, th, tw] of meta.sizes) {
      const cfg = gemma4ImageConfig({ max_soft_tokens: budget }, {}, 'test');
      if (th === null) {
        expect(() => gemma4TargetSize(h, w, cfg)).toThrow(InvalidRequestError);
        continue;
      }
      expect(gemma4TargetSize(h, w, cfg), `${budget} tokens, ${h}x${w}`).toEqual({ height: th, width: tw });
    }
  });

  it('a pixel cap (detail "low") picks the largest soft-token budget that fits, with its own cache key', async () => {
    const cfg280 = gemma4ImageConfig({}, {}, 'test');
    expect([undefined, 10_000_000, 645_120, 645_119, 200_704, 1].map((p) => gemma4SoftTokensFor(cfg280, p))).toEqual([280, 280, 280, 140, 70, 70]);
    // Capped to 70 tokens, the rows are exactly the processor's at max_soft_tokens 70.
    const c = meta.cases.find((x) => x.name === 'wide_90x60.png')!;
    const img = await source(c);
    const full = prepareWithSpec({ kind: 'gemma4', image: cfg280 }, img);
    const low = prepareWithSpec({ kind: 'gemma4', image: cfg280 }, img, { maxPixels: 200_704 });
    expect(full.tokens).toBeGreaterThan(c.tokens);
    expect([low.tokens, low.input.grid]).toEqual([c.tokens, c.grid]);
    expect(low.hash).not.toBe(full.hash);
    const bytes = new Uint8Array(low.input.pixels.buffer, low.input.pixels.byteOffset, low.input.pixels.byteLength);
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(c.sha256);
  });

  for (const c of meta.cases) {
    it(`pixel_values rows, grid and tokens: ${c.name}`, async () => {
      const { input, tokens } = gemma4Preprocess(cfg70, await source(c));
      expect(input.grid).toEqual(c.grid);
      expect(tokens).toBe(c.tokens);
      expect(input.pixels.length).toBe(c.patches * 768);
      // The kept rows first (they show where a mismatch is), then the whole array by hash.
      const kept = new Uint8Array(bin.buffer, bin.byteOffset + c.rows, c.rows_kept * 768);
      let bad = -1;
      for (let i = 0; i < kept.length && bad < 0; i++) if (input.pixels[i] !== Math.fround(kept[i] * (1 / 255))) bad = i;
      expect(bad, `first differing value (patch ${Math.floor(bad / 768)}, offset ${bad % 768})`).toBe(-1);
      const bytes = new Uint8Array(input.pixels.buffer, input.pixels.byteOffset, input.pixels.byteLength);
      expect(createHash('sha256').update(bytes).digest('hex')).toBe(c.sha256);
    });
  }
});

interface FixtureCase {
  name: string;
  hf_messages: ChatMessage[];
  prompt_text: string;
  input_ids: number[];
  mm_token_type_ids: number[];
  images: { file: string; grid: [number, number, number]; tokens: number; placeholder_offset: number; pixel_values: string }[];
}

const vlmRoot = join(import.meta.dirname, '..', 'fixtures', 'vlm');
const g4dirs = existsSync(vlmRoot)
  ? readdirSync(vlmRoot).filter((d) => d.startsWith('gemma4-') && existsSync(join(vlmRoot, d, 'reference.json')))
  : [];

describe.runIf(g4dirs.length > 0)('Gemma 4 VisionProcessor = Gemma4Processor on the VLM fixtures', () => {
  for (const d of g4dirs) {
    const dir = join(vlmRoot, d);
    const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { cases: FixtureCase[] };
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { text_config?: { use_bidirectional_attention?: unknown } };
    for (const c of ref.cases) {
      it(`${d} ${c.name}`, async () => {
        const text = loadTokenizerDir(dir);
        const processor = VisionProcessor.load(dir, text)!;
        expect(processor.family).toBe('gemma4');
        expect(processor.placeholder).toBe('<|image|>');
        const picked = selectChatTemplate(text.chatTemplates)!;
        const rendered = new ChatTemplate(picked.source, picked.name).render({
          messages: c.hf_messages,
          addGenerationPrompt: true,
          specialTokens: text.specialTokens,
        });
        expect(rendered).toBe(c.prompt_text);
        const images = [];
        for (const im of c.images) images.push(processor.prepareImage(await decodeImage(readFileSync(join(vlmRoot, 'images', im.file)))));
        const prompt = processor.buildPrompt(rendered, images);
        expect(prompt.promptIds).toEqual(c.input_ids);
        // The same from already-tokenized ids (one <|image|> per image).
        const unexpanded = encodeChatPrompt(text.tokenizer, rendered, text.bosToken);
        expect(processor.buildPrompt(unexpanded, images).promptIds).toEqual(c.input_ids);
        expect(prompt.positions).toBeUndefined();
        expect(prompt.ropeDelta).toBe(0);

        const types = new Array<number>(c.input_ids.length).fill(0);
        for (const im of prompt.images) for (let j = im.offset; j < im.offset + im.tokens; j++) types[j] = 1;
        expect(types).toEqual(c.mm_token_type_ids);
        if (config.text_config?.use_bidirectional_attention === 'vision') {
          expect(Array.from(prompt.bidirectional ?? [])).toEqual(prompt.images.flatMap((im) => [im.offset, im.offset + im.tokens]));
        } else {
          expect(prompt.bidirectional).toBeUndefined();
        }
        c.images.forEach((im, i) => {
          const got = prompt.images[i]!;
          expect([got.offset, got.tokens]).toEqual([im.placeholder_offset, im.tokens]);
          expect(got.input.grid).toEqual(im.grid);
          const buf = readFileSync(join(dir, im.pixel_values));
          const want = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
          expect(got.input.pixels.length).toBe(want.length);
          let bad = -1;
          for (let j = 0; j < want.length && bad < 0; j++) if (got.input.pixels[j] !== want[j]) bad = j;
          expect(bad, 'first differing pixel value').toBe(-1);
        });
      });
    }
  }
});

describe.runIf(g4dirs.length > 0)('Gemma 4 prompt expansion errors', () => {
  it('a placeholder count that differs from the images is a client error', async () => {
    const dir = join(vlmRoot, g4dirs[0]!);
    const processor = VisionProcessor.load(dir, loadTokenizerDir(dir))!;
    const img = processor.prepareImage(await decodeImage(readFileSync(join(vlmRoot, 'images', 'wide_90x60.png'))));
    expect(() => processor.buildPrompt('<bos><|turn>user\nhi<turn|>\n', [img])).toThrow(InvalidRequestError);
    expect(() => processor.buildPrompt('<|image|><|image|>', [img])).toThrow(/2 image placeholders but 1 image was sent/);
  });
});
