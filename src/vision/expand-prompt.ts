// Placeholder expansion, as the Hugging Face processors do it. Qwen: each <|image_pad|> becomes N copies
// (a special token, so expanding ids equals expanding text). Gemma 3: the processor rewrites the *text*
// (<start_of_image> -> "\n\n<start_of_image>" + soft x N + "<end_of_image>\n\n") before tokenizing, so
// the newlines merge with their neighbours; only text-level expansion reproduces its input_ids.

import { InvalidRequestError } from '../engine/errors.js';

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
