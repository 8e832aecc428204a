// The server's image side of a loaded vision model: image_url -> bytes (data: URIs always; http(s)
// only when allowed, through the SSRF-guarded fetcher; never local paths) -> decoded, size-checked
// pixels -> the family's preprocessing; and chat prompts with images for the engine.
import { imageChatPrompt, toImagePrompt } from '../engine/image-prompt.js';
import type { TextModel } from '../engine/text-model.js';
import { decodeImage, fetchImageBytes, type PreparedImage } from '../vision/index.js';
import type { ChatMessage } from '../template/chat-template.js';
import type { PromptEncoderPool } from './prompt-encoder-pool.js';
import type { ChatWithImages, ImageDetail, ServedVision } from './served-model.js';

export interface ImageServeOptions {
  /** Fetch http(s) image URLs (default false: data: URIs only). */
  allowRemote?: boolean;
  /** Largest image file accepted, inline or fetched (default 20 MiB). */
  maxImageBytes?: number;
  /** Whole-fetch timeout for remote images (default 10 s). */
  fetchTimeoutMs?: number;
  /** Largest width x height accepted, checked before decoding (default 50 megapixels). */
  maxImagePixels?: number;
  /** Images one request may carry (default 8). */
  maxImagesPerRequest?: number;
}

/** detail "low": at most this many resized pixels (Qwen: 256 tokens of 28x28; Gemma 3's size is fixed). */
export const LOW_DETAIL_PIXELS = 256 * 28 * 28;

export const IMAGE_DEFAULTS = { maxImageBytes: 20 * 1024 * 1024, fetchTimeoutMs: 10_000, maxImagePixels: 50_000_000, maxImagesPerRequest: 8 };

/** undefined for a model without a vision tower. `prompts`: the worker pool that renders and
 * tokenizes (the server's); without it, in this thread. */
export function servedVisionFrom(model: Pick<TextModel, 'vision' | 'renderPrompt'>, opts: ImageServeOptions = {}, prompts?: PromptEncoderPool): ServedVision | undefined {
  const processor = model.vision;
  if (processor === null) return undefined;
  const allowRemote = opts.allowRemote ?? false;
  const maxBytes = opts.maxImageBytes ?? IMAGE_DEFAULTS.maxImageBytes;
  const timeoutMs = opts.fetchTimeoutMs ?? IMAGE_DEFAULTS.fetchTimeoutMs;
  const maxPixels = opts.maxImagePixels ?? IMAGE_DEFAULTS.maxImagePixels;
  return {
    maxImagesPerRequest: opts.maxImagesPerRequest ?? IMAGE_DEFAULTS.maxImagesPerRequest,
    allowRemote,
    async loadImage(url: string, detail: ImageDetail) {
      const bytes = await fetchImageBytes(url, { allowRemote, maxBytes, timeoutMs });
      const img = await decodeImage(bytes, { maxPixels, param: 'image_url' });
      // Off the event loop: preprocessing a large image takes most of a second of CPU.
      return processor.prepareImageOffThread(img, detail === 'low' ? { maxPixels: LOW_DETAIL_PIXELS } : {});
    },
    encodeChat: prompts
      ? (messages, images, templateArgs) => imageChatOffThread(prompts, messages, images as PreparedImage[], templateArgs)
      : (messages, images, templateArgs) => imageChatPrompt(model, messages, images as PreparedImage[], templateArgs),
  };
}

/** imageChatPrompt with the rendering, tokenizing and placeholder expansion on the pool: the images'
 * shapes go to the worker, their pixels stay here and are joined to the layout it sends back. */
async function imageChatOffThread(prompts: PromptEncoderPool, messages: ChatMessage[], images: PreparedImage[], templateArgs?: Record<string, unknown>): Promise<ChatWithImages> {
  const shapes = images.map((im) => ({ tokens: im.tokens, grid: [...im.input.grid] }));
  const { promptIds, layout } = await prompts.encodeChat(messages, templateArgs, shapes);
  if (layout === undefined) throw new Error('the prompt encoder returned no image layout for a chat with images');
  return toImagePrompt({
    promptIds,
    images: images.map((im, i) => ({
      ...im,
      offset: layout.offsets[i]!,
      ...(layout.spanLengths[i] !== undefined ? { spanLength: layout.spanLengths[i] } : {}),
      ...(layout.embedAt[i] !== undefined ? { embedAt: layout.embedAt[i] } : {}),
    })),
    ropeDelta: layout.ropeDelta,
    ...(layout.positions !== undefined ? { positions: layout.positions } : {}),
    ...(layout.bidirectional !== undefined ? { bidirectional: layout.bidirectional } : {}),
  });
}
