// Gemma 4 images end to end against transformers (fixtures test/fixtures/vlm/gemma4-*): PNG -> VisionProcessor
// (chat template, Gemma4ImageProcessorPil-exact rows, <|image> + <|image|> x N + <image|>) -> the addon's
// encodeImage (the native Gemma 4 tower + embed_vision) -> a step with the image rows spliced and the
// VisionPrompt's bidirectional blocks -> logits at the stored prompt positions and 16 greedy tokens.
// Tolerances (exact precision): features max |diff| <= 1e-4 * max(1, max|f|); logits max |diff| <=
// 1e-4 * max(1, max|logit|) for f32 checkpoints, 1e-3 for quantized ones (as test/model/vlm.test.ts).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { NativeModel } from '../../src/native/types.js';
import { ChatTemplate, type ChatMessage, selectChatTemplate } from '../../src/template/chat-template.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { decodeImage } from '../../src/vision/decode-image.js';
import { VisionProcessor, type VisionPrompt } from '../../src/vision/processor.js';
import { addon } from '../helpers/addon.js';
import { expectWithin, logitsAt, readF32, runVlmSequences, type SeqImage, VLM_ROOT, vlmFixtureNames } from '../helpers/vlm.js';

interface G4Case {
  name: string;
  hf_messages: ChatMessage[];
  input_ids: number[];
  images: { file: string; features: string; tokens: number; placeholder_offset: number }[];
  logits: string;
  logits_positions: number[];
  greedy: number[];
}

const names = vlmFixtureNames().filter((n) => n.startsWith('gemma4-'));
const report: string[] = [];
afterAll(() => {
  if (report.length) console.log(`gemma4 vision summary:\n${report.join('\n')}`);
});

describe.runIf(names.length > 0).each(names)('%s: PNG -> processor -> encodeImage -> logits', (name) => {
  const dir = join(VLM_ROOT, name);
  const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { family: string; cases: G4Case[] };
  const logitTol = name.endsWith('-f32') ? 1e-4 : 1e-3;
  let model: NativeModel;
  let processor: VisionProcessor;
  let render: (messages: ChatMessage[]) => string;
  beforeAll(() => {
    model = addon().loadModel(dir, { threads: 2, kvCacheBytes: 16 << 20, precision: 'exact' });
    const text = loadTokenizerDir(dir);
    processor = VisionProcessor.load(dir, text)!;
    const picked = selectChatTemplate(text.chatTemplates)!;
    const tpl = new ChatTemplate(picked.source, picked.name);
    render = (messages) => tpl.render({ messages, addGenerationPrompt: true, specialTokens: text.specialTokens });
  });
  afterAll(() => model?.close());

  it('reports the Gemma 4 tower', () => {
    expect(ref.family).toBe('gemma4');
    expect(model.info().vision?.family).toBe('gemma4');
    expect(model.info().vision?.deepstackLayers).toBe(0);
    expect(model.info().mropeSections).toBeUndefined();
  });

  it('features, logits and greedy tokens match transformers for every case', async () => {
    let worstFeat = 0;
    let worstLogit = 0;
    for (const c of ref.cases) {
      const prepared = [];
      for (const im of c.images) prepared.push(processor.prepareImage(await decodeImage(readFileSync(join(VLM_ROOT, 'images', im.file)))));
      const prompt: VisionPrompt = processor.buildPrompt(render(c.hf_messages), prepared);
      expect(prompt.promptIds, `${c.name} input_ids`).toEqual(c.input_ids);

      const images: SeqImage[] = [];
      for (const [i, im] of prompt.images.entries()) {
        const out = await model.encodeImage(im.input);
        expect(out.tokens).toBe(c.images[i]!.tokens);
        worstFeat = Math.max(worstFeat, expectWithin(out.embeddings, readF32(dir, c.images[i]!.features), 1e-4, `${c.name} image ${i} features`));
        images.push({ offset: im.offset, tokens: out.tokens, data: out.embeddings });
      }
      // runVlmSequences derives the blocks from the image spans: they must be the VisionPrompt's.
      const bidirectional = prompt.bidirectional !== undefined;
      if (bidirectional) expect(Array.from(prompt.bidirectional!)).toEqual(images.flatMap((im) => [im.offset, im.offset + im.tokens]));

      const spec = { id: c.name, prompt: prompt.promptIds, images, bidirectional, maxTokens: c.greedy.length, wantLogits: true };
      const out = (await runVlmSequences(model, [spec])).get(c.name)!;
      expect(out.errors).toEqual([]);
      const vocab = model.info().vocabSize;
      worstLogit = Math.max(worstLogit, expectWithin(logitsAt(out.logits!, c.logits_positions, vocab), readF32(dir, c.logits), logitTol, `${c.name} logits`));
      expect(out.tokens, `${c.name} greedy`).toEqual(c.greedy);
    }
    report.push(`${name}: features ${worstFeat.toExponential(2)}, logits ${worstLogit.toExponential(2)} (max |diff| / max(1, |ref|))`);
  });
});
