// The VisionProcessor of a model directory: what the Hugging Face processor does for a VLM prompt.
// Images -> NativeImageInput (pixel_values + grid); rendered prompt -> expanded input_ids, each image's
// token span, and the family's positions (Qwen mRoPE ids + delta; Gemma 3 bidirectional image blocks).

import { join } from 'node:path';

import { InvalidRequestError } from '../errors/request-errors.js';
import { encodeChatPrompt } from '../template/chat-template.js';
import { specialTokenString, type TokenizerBundle } from '../tokenizer/load-tokenizer.js';
import { decodeImage, type DecodedImage, type DecodeImageOptions } from './decode-image.js';
import { expandImageTokenIds, expandPixtralImageIds, expandPlaceholderText, expandWrappedImageIds, locateImageRuns, placeholderMismatch } from './expand-prompt.js';
import { gemma3ImageConfig, type Gemma3ImageConfig } from './gemma3-image-processor.js';
import { gemma4ImageConfig, type Gemma4ImageConfig } from './gemma4-image-processor.js';
import { type Json, num, obj, readJsonObject, readProcessorFiles } from './image-processor-config.js';
import { mropePositions } from './mrope-positions.js';
import { type PreparedImage, type PrepareImageOptions, type PreprocessSpec, prepareWithSpec } from './prepare-image.js';
import { pixtralImageConfig, type PixtralImageConfig } from './pixtral-image-processor.js';
import { preprocessPool } from './preprocess-pool.js';
import { qwenImageConfig, type QwenImageConfig } from './qwen-image-processor.js';

export type VisionFamily = 'qwen2_5_vl' | 'qwen3_vl' | 'gemma3' | 'mistral3' | 'gemma4';

export type { PreparedImage, PrepareImageOptions } from './prepare-image.js';

export interface VisionPromptImage extends PreparedImage {
  offset: number; // first image token in promptIds; the span is [offset, offset + tokens)
  // Pixtral: the span [offset, offset + spanLength) includes [IMG_BREAK]/[IMG_END]; embedAt = offsets in it of
  // the `tokens` [IMG] tokens that take the embedding rows (in order).
  spanLength?: number;
  embedAt?: Int32Array;
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
  mistral3: 'mistral3',
  gemma4: 'gemma4',
};

type FamilySettings =
  | { kind: 'qwen'; image: QwenImageConfig; imageToken: string }
  | { kind: 'gemma3'; image: Gemma3ImageConfig; boiToken: string; expansion: string }
  | { kind: 'pixtral'; image: PixtralImageConfig; imageToken: string; breakId: number; endId: number }
  // bidirectional: text_config.use_bidirectional_attention == "vision" (HF applies image blocks only then).
  | { kind: 'gemma4'; image: Gemma4ImageConfig; imageToken: string; boiId: number; eoiId: number; bidirectional: boolean };

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

    if (family === 'mistral3') {
      const cfg = pixtralImageConfig(image, processor, config, where);
      const str = (v: unknown, fallback: string): string => (typeof v === 'string' ? v : fallback);
      const imageToken = str(processor.image_token, '[IMG]');
      const imageTokenId = idOf(imageToken);
      const configured = num(config.image_token_index) ?? num(config.image_token_id);
      if (configured !== undefined && configured !== imageTokenId) {
        throw new Error(`${dir}: config.json image_token_index ${configured} is not the tokenizer's ${imageToken} (${imageTokenId})`);
      }
      const breakId = idOf(str(processor.image_break_token, '[IMG_BREAK]'));
      const endId = idOf(str(processor.image_end_token, '[IMG_END]'));
      return new VisionProcessor(family, imageTokenId, { kind: 'pixtral', image: cfg, imageToken, breakId, endId }, text);
    }

    if (family === 'gemma4') {
      const cfg = gemma4ImageConfig(image, config, where);
      const imageToken = tokenizerConfigToken(tokCfg, 'image_token', '<|image|>');
      const imageTokenId = idOf(imageToken);
      const configured = num(config.image_token_id);
      if (configured !== undefined && configured !== imageTokenId) {
        throw new Error(`${dir}: config.json image_token_id ${configured} is not the tokenizer's ${imageToken} (${imageTokenId})`);
      }
      const boiId = idOf(tokenizerConfigToken(tokCfg, 'boi_token', '<|image>'));
      const eoiId = idOf(tokenizerConfigToken(tokCfg, 'eoi_token', '<image|>'));
      const bidirectional = obj(config.text_config)?.use_bidirectional_attention === 'vision';
      return new VisionProcessor(family, imageTokenId, { kind: 'gemma4', image: cfg, imageToken, boiId, eoiId, bidirectional }, text);
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
    return this.settings.kind === 'gemma3' ? this.settings.boiToken : this.settings.imageToken;
  }

  /** The plain-data preprocessing settings (what a worker thread needs). */
  get preprocessSpec(): PreprocessSpec {
    const s = this.settings;
    if (s.kind === 'pixtral') return { kind: 'pixtral', image: s.image };
    if (s.kind === 'gemma4') return { kind: 'gemma4', image: s.image };
    return s.kind === 'qwen' ? { kind: 'qwen', image: s.image } : { kind: 'gemma3', image: s.image };
  }

  /** Resize, normalize and lay out one decoded image (synchronous CPU work on the calling thread). */
  prepareImage(img: DecodedImage, options: PrepareImageOptions = {}): PreparedImage {
    return prepareWithSpec(this.preprocessSpec, img, options);
  }

  /** prepareImage on the shared worker pool (bounded queue, timeout): keeps the event loop free. */
  prepareImageOffThread(img: DecodedImage, options: PrepareImageOptions = {}): Promise<PreparedImage> {
    return preprocessPool().prepare(this.preprocessSpec, img, options);
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
    if (s.kind === 'pixtral') {
      const ids = typeof rendered === 'string' ? encodeChatPrompt(tok, rendered, this.text.bosToken) : rendered;
      const unit = s.image.mergeSize;
      const grids = images.map((im) => ({ rows: im.input.grid[1] / unit, cols: im.input.grid[2] / unit }));
      const ex = expandPixtralImageIds(ids, { image: this.imageTokenId, rowBreak: s.breakId, end: s.endId }, grids);
      const out: VisionPromptImage[] = images.map((im, i) => ({ ...im, offset: ex.offsets[i]!, spanLength: ex.spans[i]!, embedAt: ex.embedAt[i]! }));
      return { promptIds: ex.ids, images: out, ropeDelta: 0 };
    }
    if (s.kind === 'gemma4') {
      const ids = typeof rendered === 'string' ? encodeChatPrompt(tok, rendered, this.text.bosToken) : rendered;
      const ex = expandWrappedImageIds(ids, { image: this.imageTokenId, begin: s.boiId, end: s.eoiId }, counts);
      const out: VisionPromptImage[] = images.map((im, i) => ({ ...im, offset: ex.offsets[i]! }));
      if (!s.bidirectional) return { promptIds: ex.ids, images: out, ropeDelta: 0 };
      const bidirectional = new Int32Array(out.flatMap((im) => [im.offset, im.offset + im.tokens]));
      return { promptIds: ex.ids, images: out, ropeDelta: 0, bidirectional };
    }
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
