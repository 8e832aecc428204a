// `rapid run MODEL --image FILE [--image FILE2] --prompt TEXT`: local image files through the same
// engine path as the server (encoder, image spans, mRoPE positions), streamed to stdout.
import { readFileSync } from 'node:fs';
import { runOneRequest, type OneRequestEngineOptions } from '../../app/one-request.js';
import type { RequestGrammar } from '../../engine/grammar/request-grammar.js';
import { imageChatPrompt, imageUserMessage } from '../../engine/image-prompt.js';
import type { SamplingParams } from '../../engine/sampling-params.js';
import type { TextModel } from '../../engine/text-model.js';
import { modelDevice } from '../../engine/model-device.js';
import type { ChatMessage } from '../../template/chat-template.js';
import { decodeImage, type PreparedImage } from '../../vision/index.js';

export interface RunImagesOptions {
  prompt: string;
  system?: string;
  images: string[];
  params: SamplingParams;
  grammar?: RequestGrammar;
  json: boolean;
  spec: string;
  engine: OneRequestEngineOptions;
}

export async function runWithImages(model: TextModel, o: RunImagesOptions): Promise<void> {
  const vision = model.vision;
  if (vision === null) {
    o.grammar?.dispose();
    throw new Error(`${o.spec} does not accept images (no vision tower in ${model.dir}); drop --image or use a vision model`);
  }
  const prepared: PreparedImage[] = [];
  try {
    for (const file of o.images) {
      let bytes: Buffer;
      try {
        bytes = readFileSync(file);
      } catch (err) {
        throw new Error(`--image ${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message}`);
      }
      try {
        prepared.push(await vision.prepareImageOffThread(await decodeImage(bytes)));
      } catch (err) {
        throw new Error(`--image ${file}: ${(err as Error).message}`);
      }
    }
  } catch (err) {
    o.grammar?.dispose();
    throw err;
  }
  const messages: ChatMessage[] = [...(o.system !== undefined ? [{ role: 'system', content: o.system }] : []), imageUserMessage(o.prompt, prepared.length)];
  const { promptIds, multimodal } = imageChatPrompt(model, messages, prepared);
  const { done, imageEncodeMs } = await runOneRequest(model, { promptIds, params: o.params, multimodal, grammar: o.grammar }, o.json ? undefined : (text) => process.stdout.write(text), o.engine);
  if (o.json) {
    process.stdout.write(
      `${JSON.stringify({
        text: done.text,
        token_ids: done.tokenIds,
        finish_reason: done.finishReason,
        usage: { prompt_tokens: done.usage.promptTokens, completion_tokens: done.usage.completionTokens, total_tokens: done.usage.totalTokens },
        images: multimodal.images.map((im) => ({ grid: im.input.grid, tokens: im.length })),
        device: modelDevice(model.info),
        timings: {
          image_encode_ms: round(imageEncodeMs),
          ttft_ms: round(done.timings.ttftMs),
          total_ms: round(done.timings.totalMs),
          decode_tokens_per_second: round(done.timings.decodeTokensPerSecond),
        },
      })}\n`,
    );
    return;
  }
  process.stdout.write('\n');
  if (process.stderr.isTTY) {
    process.stderr.write(
      `[${done.usage.promptTokens} prompt tokens incl. ${multimodal.images.reduce((n, im) => n + im.length, 0)} image tokens ` +
        `(encode ${imageEncodeMs.toFixed(0)} ms), first token after ${done.timings.ttftMs.toFixed(0)} ms, ` +
        `${done.usage.completionTokens} generated at ${done.timings.decodeTokensPerSecond.toFixed(1)} tok/s, finish: ${done.finishReason}]\n`,
    );
  }
}

function round(x: number): number {
  return Math.round(x * 100) / 100;
}
