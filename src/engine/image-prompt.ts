// A chat prompt with images for a loaded vision model: the chat template renders each image part
// as the family's placeholder, the VisionProcessor expands it to the image's tokens, and the result
// becomes the engine's per-request image data (spans, hashes, pixels, mRoPE positions + delta).
import type { ChatMessage } from '../template/chat-template.js';
import type { PreparedImage, VisionPrompt } from '../vision/index.js';
import type { MultimodalInput } from './multimodal.js';
import type { TextModel } from './text-model.js';

export interface ImagePrompt {
  promptIds: number[];
  multimodal: MultimodalInput;
}

/** The engine's view of a VisionProcessor prompt. */
export function toImagePrompt(vp: VisionPrompt): ImagePrompt {
  const multimodal: MultimodalInput = {
    images: vp.images.map((im) => ({
      hash: im.hash,
      input: im.input,
      offset: im.offset,
      length: im.spanLength ?? im.tokens,
      ...(im.embedAt !== undefined ? { embedAt: im.embedAt } : {}),
    })),
  };
  if (vp.positions !== undefined) {
    multimodal.positions = vp.positions;
    multimodal.ropeDelta = vp.ropeDelta;
  }
  // TV's blocks are exactly the images' soft-token spans, which is what the engine sends per row.
  if (vp.bidirectional !== undefined && vp.bidirectional.length > 0) multimodal.bidirectional = true;
  return { promptIds: vp.promptIds, multimodal };
}

/**
 * Renders `messages` (image content parts as {type: "image"}, in the order of `images`) and expands
 * the placeholders. Throws InvalidRequestError when the model takes no images or the counts differ.
 */
export function imageChatPrompt(model: Pick<TextModel, 'vision' | 'renderPrompt'>, messages: ChatMessage[], images: readonly PreparedImage[], templateArgs?: Record<string, unknown>): ImagePrompt {
  if (model.vision === null) throw new Error('this model does not accept images (it has no vision tower)');
  const rendered = model.renderPrompt({ messages, templateArgs });
  return toImagePrompt(model.vision.buildPrompt(rendered, images));
}

/** The user message of `rapid run --image`: the images first, then the text (as HF examples do). */
export function imageUserMessage(prompt: string, imageCount: number): ChatMessage {
  return { role: 'user', content: [...Array.from({ length: imageCount }, () => ({ type: 'image' })), { type: 'text', text: prompt }] };
}
