// End-to-end parity with transformers 5 on helper FX's fixtures (test/fixtures/vlm): from the PNG files and
// the chat messages to input_ids, pixel_values, image_grid_thw, position_ids and rope_delta.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { ChatTemplate, type ChatMessage, selectChatTemplate } from '../../src/template/chat-template.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { decodeImage } from '../../src/vision/decode-image.js';
import { VisionProcessor } from '../../src/vision/processor.js';

interface RefImage {
  file: string;
  grid: [number, number, number];
  tokens: number;
  placeholder_offset: number;
  pixel_values: string;
  pixel_values_shape: number[];
}
interface RefCase {
  name: string;
  hf_messages: ChatMessage[];
  prompt_text: string;
  input_ids: number[];
  images: RefImage[];
  position_ids?: number[][];
  rope_delta?: number;
  token_type_ids?: number[];
  mm_token_type_ids?: number[];
}

const root = join(import.meta.dirname, '..', 'fixtures', 'vlm');
const dirs = existsSync(root)
  ? readdirSync(root).filter((d) => existsSync(join(root, d, 'reference.json')) && existsSync(join(root, d, 'tokenizer.json')))
  : [];

describe.runIf(dirs.length > 0)('VisionProcessor reproduces the transformers processor on the VLM fixtures', () => {
  for (const d of dirs) {
    const dir = join(root, d);
    const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { cases: RefCase[] };
    for (const c of ref.cases) {
      it(`${d} ${c.name}`, async () => {
        const text = loadTokenizerDir(dir);
        const processor = VisionProcessor.load(dir, text);
        expect(processor).not.toBeNull();
        const picked = selectChatTemplate(text.chatTemplates)!;
        const rendered = new ChatTemplate(picked.source, picked.name).render({
          messages: c.hf_messages,
          addGenerationPrompt: true,
          specialTokens: text.specialTokens,
        });
        expect(rendered).toBe(c.prompt_text);

        const images = [];
        for (const im of c.images) {
          const bytes = new Uint8Array(readFileSync(join(root, 'images', im.file)));
          images.push(processor!.prepareImage(await decodeImage(bytes)));
        }
        const prompt = processor!.buildPrompt(rendered, images);
        expect(prompt.promptIds).toEqual(c.input_ids);

        c.images.forEach((im, i) => {
          const got = prompt.images[i];
          expect(got.offset).toBe(im.placeholder_offset);
          expect(got.tokens).toBe(im.tokens);
          expect(got.input.grid).toEqual(im.grid);
          const want = new Float32Array(new Uint8Array(readFileSync(join(dir, im.pixel_values))).buffer);
          expect(got.input.pixels.length).toBe(want.length);
          let maxDiff = 0;
          for (let j = 0; j < want.length; j++) maxDiff = Math.max(maxDiff, Math.abs(got.input.pixels[j] - want[j]));
          expect(maxDiff).toBe(0); // bit-exact: same PIL arithmetic, same f32 ops
        });

        if (c.position_ids !== undefined) {
          const n = c.input_ids.length;
          expect(prompt.positions).toBeDefined();
          const p = prompt.positions!;
          expect([Array.from(p.subarray(0, n)), Array.from(p.subarray(n, 2 * n)), Array.from(p.subarray(2 * n))]).toEqual(
            c.position_ids,
          );
          expect(prompt.ropeDelta).toBe(c.rope_delta);
        }
        const types = c.token_type_ids ?? c.mm_token_type_ids;
        if (types !== undefined) {
          // Image blocks (Gemma 3 bidirectional spans, Qwen image spans) are exactly the type-1 runs.
          const mine = new Array<number>(c.input_ids.length).fill(0);
          for (const im of prompt.images) for (let j = im.offset; j < im.offset + im.tokens; j++) mine[j] = 1;
          expect(mine).toEqual(types);
        }
        if (prompt.bidirectional !== undefined) {
          expect(Array.from(prompt.bidirectional)).toEqual(prompt.images.flatMap((im) => [im.offset, im.offset + im.tokens]));
        }
      });
    }
  }
});
