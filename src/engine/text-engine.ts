// An Engine over a loaded text model: its native step, KV pool geometry, streaming detokenizer and
// stop token ids. Used by `rapid serve`, and by anything else that wants continuous batching.
import { StreamingDetokenizer } from './detokenizer.js';
import { Engine, type EngineOptions } from './engine.js';
import type { TextModel } from './text-model.js';
import { defaultSpeculative } from './speculative/speculator.js';

export type TextEngineOptions = Omit<EngineOptions, 'model' | 'newTextStream'>;

export function createTextEngine(model: TextModel, options: TextEngineOptions = {}): Engine {
  return new Engine({
    contextLength: model.info.contextLength,
    vocabSize: model.info.vocabSize,
    blockSize: model.info.blockSize,
    numBlocks: model.info.numBlocks,
    stopTokenIds: model.text.stopTokenIds,
    ...options,
    speculative: options.speculative ?? defaultSpeculative(model.info.device),
    model: model.native,
    newTextStream: (o) => new StreamingDetokenizer(model.text.tokenizer, { skipSpecialTokens: o?.keepSpecialTokens !== true }),
  });
}
