// Placeholder expansion, as the Hugging Face processors do it. Qwen: each <|image_pad|> becomes N copies
// (a special token, so expanding ids equals expanding text). Gemma 3: the processor rewrites the *text*
// (<start_of_image> -> "\n\n<start_of_image>" + soft x N + "<end_of_image>\n\n") before tokenizing, so
// the newlines merge with their neighbours; only text-level expansion reproduces its input_ids.

import { InvalidRequestError } from '../errors/request-errors.js';

/** The error for a prompt whose placeholder count differs from the number of images sent. */
export function placeholderMismatch(placeholders: number, images: number): InvalidRequestError {
  const p = `${placeholders} image placeholder${placeholders === 1 ? '' : 's'}`;
  const i = `${images} image${images === 1 ? ' was' : 's were'} sent`;
  return new InvalidRequestError(
    `the prompt has ${p} but ${i}: every image needs exactly one image content part in the messages`,
    'messages',
  );
}

export interface ExpandedIds {
  ids: number[];
  offsets: number[]; // first image token of each image, in order
}

/** Replaces the i-th `imageTokenId` with counts[i] copies of it. */
export function expandImageTokenIds(ids: readonly number[], imageTokenId: number, counts: readonly number[]): ExpandedIds {
  let found = 0;
  for (const id of ids) if (id === imageTokenId) found++;
  if (found !== counts.length) throw placeholderMismatch(found, counts.length);
  const out: number[] = [];
  const offsets: number[] = [];
  let k = 0;
  for (const id of ids) {
    if (id !== imageTokenId) {
      out.push(id);
      continue;
    }
    offsets.push(out.length);
    for (let j = 0; j < counts[k]; j++) out.push(imageTokenId);
    k++;
  }
  return { ids: out, offsets };
}

/** Text-level replacement of every occurrence of `placeholder` by replacements[i], in order. */
export function expandPlaceholderText(text: string, placeholder: string, replacements: readonly string[]): string {
  const parts = text.split(placeholder);
  if (parts.length - 1 !== replacements.length) throw placeholderMismatch(parts.length - 1, replacements.length);
  let out = parts[0];
  for (let i = 0; i < replacements.length; i++) out += replacements[i] + parts[i + 1];
  return out;
}

/** Finds the runs of `imageTokenId` in tokenized ids; they must be exactly the expected images. */
export function locateImageRuns(ids: readonly number[], imageTokenId: number, counts: readonly number[]): number[] {
  const offsets: number[] = [];
  const lengths: number[] = [];
  for (let i = 0; i < ids.length; i++) {
    if (ids[i] !== imageTokenId) continue;
    if (i > 0 && ids[i - 1] === imageTokenId) {
      lengths[lengths.length - 1]++;
    } else {
      offsets.push(i);
      lengths.push(1);
    }
  }
  const same = offsets.length === counts.length && lengths.every((l, i) => l === counts[i]);
  if (!same) {
    throw new InvalidRequestError(
      `the prompt text contains image tokens of its own (${lengths.length} runs of lengths ${lengths.join(', ')} where ` +
        `${counts.length} images of ${counts.join(', ')} tokens were expected): remove them from the message text`,
      'messages',
    );
  }
  return offsets;
}

export interface PixtralExpandedIds extends ExpandedIds {
  spans: number[]; // tokens from each image's first [IMG] through its [IMG_END]
  embedAt: Int32Array[]; // per image: offsets inside its span of the [IMG] tokens (the embedding rows, in order)
}

/**
 * Pixtral (Mistral 3): the i-th [IMG] becomes grids[i].rows rows of [IMG] x cols + [IMG_BREAK], the last
 * break replaced by [IMG_END] (PixtralProcessor.replace_image_token; all three are special tokens, so ids
 * expand exactly as the text does).
 */
export function expandPixtralImageIds(
  ids: readonly number[],
  tokens: { image: number; rowBreak: number; end: number },
  grids: readonly { rows: number; cols: number }[],
): PixtralExpandedIds {
  let found = 0;
  for (const id of ids) if (id === tokens.image) found++;
  if (found !== grids.length) throw placeholderMismatch(found, grids.length);
  const out: number[] = [];
  const offsets: number[] = [];
  const spans: number[] = [];
  const embedAt: Int32Array[] = [];
  let k = 0;
  for (const id of ids) {
    if (id !== tokens.image) {
      out.push(id);
      continue;
    }
    const { rows, cols } = grids[k++]!;
    const at = new Int32Array(rows * cols);
    offsets.push(out.length);
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < cols; c++) {
        at[r * cols + c] = r * (cols + 1) + c;
        out.push(tokens.image);
      }
      out.push(r === rows - 1 ? tokens.end : tokens.rowBreak);
    }
    spans.push(rows * (cols + 1));
    embedAt.push(at);
  }
  return { ids: out, offsets, spans, embedAt };
}

/**
 * Gemma 4: the i-th image token becomes begin + image x counts[i] + end (Gemma4Processor.replace_image_token;
 * all three are special tokens, so ids expand exactly as the text does). Offsets point at the first image token.
 */
export function expandWrappedImageIds(
  ids: readonly number[],
  tokens: { image: number; begin: number; end: number },
  counts: readonly number[],
): ExpandedIds {
  let found = 0;
  for (const id of ids) if (id === tokens.image) found++;
  if (found !== counts.length) throw placeholderMismatch(found, counts.length);
  const out: number[] = [];
  const offsets: number[] = [];
  let k = 0;
  for (const id of ids) {
    if (id !== tokens.image) {
      out.push(id);
      continue;
    }
    out.push(tokens.begin);
    offsets.push(out.length);
    for (let j = 0; j < counts[k]; j++) out.push(tokens.image);
    out.push(tokens.end);
    k++;
  }
  return { ids: out, offsets };
}
