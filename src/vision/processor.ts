// The VisionProcessor of a model directory: what the Hugging Face processor does for a VLM prompt.
// Images -> NativeImageInput (pixel_values + grid); rendered prompt -> expanded input_ids, each image's
// token span, and the family's positions (Qwen mRoPE ids + delta; Gemma 3 bidirectional image blocks).

import { join } from 'node:path';

import { InvalidRequestError } from '../engine/errors.js';
import type { NativeImageInput } from '../native/types.js';
import { encodeChatPrompt } from '../template/chat-template.js';
import { specialTokenString, type TokenizerBundle } from '../tokenizer/load-tokenizer.js';
import { decodeImage, type DecodedImage, type DecodeImageOptions } from './decode-image.js';
import { expandImageTokenIds, expandPlaceholderText, locateImageRuns, placeholderMismatch } from './expand-prompt.js';
import { gemma3ImageConfig, gemma3Preprocess, type Gemma3ImageConfig } from './gemma3-image-processor.js';
import { imageHash, variantHash } from './image-hash.js';
import { type Json, num, obj, readJsonObject, readProcessorFiles } from './image-processor-config.js';
import { mropePositions } from './mrope-positions.js';
import { qwenImageConfig, qwenPreprocess, type QwenImageConfig } from './qwen-image-processor.js';

export type VisionFamily = 'qwen2_5_vl' | 'qwen3_vl' | 'gemma3';

export interface PreparedImage {
  hash: string; // imageHash of the decoded pixels
  input: NativeImageInput; // the HF processor's pixel_values rows + grid for this one image
  tokens: number; // placeholder tokens this image expands to
}

export interface PrepareImageOptions {
  /** Qwen: a lower max_pixels than the processor config's (Gemma 3 always uses its fixed size). */
  maxPixels?: number;
}

export interface VisionPromptImage extends PreparedImage {
  offset: number; // first image token in promptIds; the span is [offset, offset + tokens)
}

export interface VisionPrompt {
  promptIds: number[];
  images: VisionPromptImage[];
  positions?: Int32Array; // Qwen: [3 * promptIds.length] axis-major (T, H, W)
  ropeDelta: number; // Qwen: decode token i (i >= n) has position i + ropeDelta on all axes; 0 otherwise
  bidirectional?: Int32Array; // Gemma 3: [2k] [start, end) of each image's soft tokens
}

const FAMILY_OF_MODEL_TYPE: Record<string, VisionFamily> = {
  qwen2_5_vl: 'qwen2_5_vl',
  qwen3_vl: 'qwen3_vl',
  qwen3_vl_moe: 'qwen3_vl',
  gemma3: 'gemma3',
};

type FamilySettings =
  | { kind: 'qwen'; image: QwenImageConfig; imageToken: string }
  | { kind: 'gemma3'; image: Gemma3ImageConfig; boiToken: string; expansion: string };

/** A tokenizer_config.json special token by key, top level or under extra_special_tokens. */
function tokenizerConfigToken(cfg: Json | null, key: string, fallback: string): string {
  const direct = specialTokenString(cfg?.[key]);
  if (direct !== null) return direct;
  const extra = specialTokenString(obj(cfg?.extra_special_tokens)?.[key]);
  return extra ?? fallback;
}

export class VisionProcessor {
  private constructor(
    readonly family: VisionFamily,
    readonly imageTokenId: number,
    private readonly settings: FamilySettings,
    private readonly text: TokenizerBundle,
  ) {}

  /** null when config.json does not describe a vision-language model of a supported family. */
  static load(dir: string, text: TokenizerBundle): VisionProcessor | null {
    const config = readJsonObject(join(dir, 'config.json'));
    if (config === null) return null;
    const modelType = typeof config.model_type === 'string' ? config.model_type : '';
    const family = FAMILY_OF_MODEL_TYPE[modelType];
    if (family === undefined || obj(config.vision_config) === undefined) return null;
    const { image, processor } = readProcessorFiles(dir);
    const tokCfg = readJsonObject(join(dir, 'tokenizer_config.json'));
    const where = `${dir} (image processor config)`;
    const idOf = (token: string): number => {
      const id = text.tokenizer.tokenToId(token);
      if (id === undefined) throw new Error(`${dir}: the tokenizer has no ${token} token, needed for images`);
      return id;
    };

    if (family === 'gemma3') {
      const cfg = gemma3ImageConfig(image, processor, config, where);
      const boiToken = tokenizerConfigToken(tokCfg, 'boi_token', '<start_of_image>');
      const eoiToken = tokenizerConfigToken(tokCfg, 'eoi_token', '<end_of_image>');
      const imageToken = tokenizerConfigToken(tokCfg, 'image_token', '<image_soft_token>');
      const imageTokenId = idOf(imageToken);
      idOf(boiToken);
      idOf(eoiToken);
      const expansion = `\n\n${boiToken}${imageToken.repeat(cfg.tokens)}${eoiToken}\n\n`;
      return new VisionProcessor(family, imageTokenId, { kind: 'gemma3', image: cfg, boiToken, expansion }, text);
    }

    const cfg = qwenImageConfig(family, image, obj(config.vision_config), where);
    const imageToken = tokenizerConfigToken(tokCfg, 'image_token', '<|image_pad|>');
    const imageTokenId = idOf(imageToken);
    const configured = num(config.image_token_id) ?? num(config.image_token_index);
    if (configured !== undefined && configured !== imageTokenId) {
      throw new Error(`${dir}: config.json image_token_id ${configured} is not the tokenizer's ${imageToken} (${imageTokenId})`);
    }
    return new VisionProcessor(family, imageTokenId, { kind: 'qwen', image: cfg, imageToken }, text);
  }

  /** The text each image content part must render to (Qwen: inside vision_start/vision_end). */
  get placeholder(): string {
    return this.settings.kind === 'qwen' ? this.settings.imageToken : this.settings.boiToken;
  }

  /** Resize, normalize and lay out one decoded image (synchronous CPU work). */
  prepareImage(img: DecodedImage, options: PrepareImageOptions = {}): PreparedImage {
    const s = this.settings;
    const hash = imageHash(img);
    if (s.kind === 'gemma3') return { hash, ...gemma3Preprocess(s.image, img) };
    const cap = options.maxPixels;
    if (cap === undefined || cap >= s.image.maxPixels) return { hash, ...qwenPreprocess(s.image, img) };
    // A lower pixel budget (e.g. OpenAI detail "low"), never below min_pixels; a different cache key.
    const maxPixels = Math.max(cap, s.image.minPixels);
    return { hash: variantHash(hash, `max_pixels=${maxPixels}`), ...qwenPreprocess({ ...s.image, maxPixels }, img) };
  }

  /** decodeImage + prepareImage. */
  async prepareImageBytes(bytes: Uint8Array, options?: DecodeImageOptions & PrepareImageOptions): Promise<PreparedImage> {
    return this.prepareImage(await decodeImage(bytes, options), options);
  }

  /**
   * Expands the image placeholders of a rendered prompt (text preferred; ids work too but for Gemma 3 the
   * "\n\n" around an image then do not merge with neighbouring newlines as HF's text-level expansion does).
   */
  buildPrompt(rendered: string | readonly number[], images: readonly PreparedImage[]): VisionPrompt {
    const counts = images.map((im) => im.tokens);
    const tok = this.text.tokenizer;
    let promptIds: number[];
    let offsets: number[];
    const s = this.settings;
    if (s.kind === 'gemma3' && typeof rendered === 'string') {
      const text = expandPlaceholderText(rendered, s.boiToken, images.map(() => s.expansion));
      promptIds = encodeChatPrompt(tok, text, this.text.bosToken);
      offsets = locateImageRuns(promptIds, this.imageTokenId, counts);
    } else if (s.kind === 'gemma3') {
      const boiId = tok.tokenToId(s.boiToken)!;
      const ids = rendered as readonly number[];
      const expansionIds = tok.encode(s.expansion, { addSpecialTokens: false });
      const found = ids.filter((id) => id === boiId).length;
      if (found !== images.length) throw placeholderMismatch(found, images.length);
      promptIds = [];
      for (const id of ids) {
        if (id === boiId) promptIds.push(...expansionIds);
        else promptIds.push(id);
      }
      offsets = locateImageRuns(promptIds, this.imageTokenId, counts);
    } else {
      const ids = typeof rendered === 'string' ? encodeChatPrompt(tok, rendered, this.text.bosToken) : rendered;
      const expanded = expandImageTokenIds(ids, this.imageTokenId, counts);
      promptIds = expanded.ids;
      offsets = expanded.offsets;
    }

    const out: VisionPromptImage[] = images.map((im, i) => ({ ...im, offset: offsets[i] }));
    if (s.kind === 'qwen') {
      const spans = out.map((im) => ({ offset: im.offset, grid: im.input.grid }));
      const { positions, ropeDelta } = mropePositions(promptIds.length, spans, s.image.mergeSize);
      return { promptIds, images: out, positions, ropeDelta };
    }
    const bidirectional = new Int32Array(out.length * 2);
    out.forEach((im, i) => {
      bidirectional[2 * i] = im.offset;
      bidirectional[2 * i + 1] = im.offset + im.tokens;
    });
    return { promptIds, images: out, ropeDelta: 0, bidirectional };
  }
}

/** Checks a request's image count against what the model can take, before any decoding work. */
export function assertImagesAllowed(processor: VisionProcessor | null, imageCount: number, model: string): void {
  if (imageCount > 0 && processor === null) {
    throw new InvalidRequestError(`model ${model} does not accept images (it has no vision tower); send text only`, 'messages');
  }
}
