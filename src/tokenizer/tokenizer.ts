// A Hugging Face tokenizer.json tokenizer: added tokens -> normalizer -> pre-tokenizer -> BPE model
// -> post-processor, and the decoder chain back to text.

import { readFileSync } from 'node:fs';

import { AddedVocabulary, type AddedToken } from './added-vocabulary.js';
import { BpeModel, type BpeOptions } from './bpe-model.js';
import { buildDecoder, type Decoder } from './decoders.js';
import { buildNormalizer, type Normalizer } from './normalizers.js';
import { buildPostProcessor, type PostProcessor } from './post-processors.js';
import { buildPreTokenizer, type Piece, type PreTokenizer } from './pre-tokenizers.js';
import {
  asComponent, type ComponentConfig, TokenizerConfigError, type TokenizerJson, unsupported,
} from './tokenizer-json.js';

export interface EncodeOptions {
  /** Apply the post-processor's special tokens (e.g. BOS). Default true. */
  addSpecialTokens?: boolean;
  /** Recognise special added tokens written in the text. Default true; false treats them as plain text. */
  parseSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Drop special added tokens from the output. Default false. */
  skipSpecialTokens?: boolean;
}

export type { AddedToken };

function collectTypes(cfg: ComponentConfig | null | undefined, into: Set<string>): void {
  if (cfg === null || cfg === undefined) return;
  into.add(cfg.type);
  for (const key of ['decoders', 'normalizers', 'pretokenizers', 'processors']) {
    const v = cfg[key];
    if (Array.isArray(v)) for (const c of v) collectTypes(c as ComponentConfig, into);
  }
}

export class Tokenizer {
  readonly model: BpeModel;
  readonly added: AddedVocabulary;
  /** Types of every decoder in the chain (e.g. "ByteLevel", "ByteFallback", "Metaspace"). */
  readonly decoderTypes: ReadonlySet<string>;
  private readonly normalizer: Normalizer | null;
  private readonly preTokenizer: PreTokenizer | null;
  private postProcessor: PostProcessor | null;
  private readonly decoder: Decoder | null;
  private readonly vocabSizeValue: number;

  constructor(json: TokenizerJson, options: BpeOptions = {}) {
    const model = asComponent(json.model, 'model');
    // tokenizer.json from older exporters omits the BPE type tag.
    const modelType = model.type ?? ('merges' in model ? 'BPE' : undefined);
    if (modelType !== 'BPE') throw unsupported('model', modelType);
    this.model = new BpeModel(model, options);
    this.normalizer = json.normalizer ? buildNormalizer(asComponent(json.normalizer, 'normalizer')) : null;
    this.preTokenizer = json.pre_tokenizer ? buildPreTokenizer(asComponent(json.pre_tokenizer, 'pre_tokenizer')) : null;
    this.postProcessor = json.post_processor ? buildPostProcessor(asComponent(json.post_processor, 'post_processor')) : null;
    this.decoder = json.decoder ? buildDecoder(asComponent(json.decoder, 'decoder')) : null;
    const types = new Set<string>();
    collectTypes(json.decoder, types);
    this.decoderTypes = types;
    const addedTokens = json.added_tokens ?? [];
    if (!Array.isArray(addedTokens)) throw new TokenizerConfigError('added_tokens must be an array');
    this.added = new AddedVocabulary(addedTokens, this.normalizer);
    let maxId = this.model.vocabSize - 1;
    for (const t of this.added.tokens) maxId = Math.max(maxId, t.id);
    this.vocabSizeValue = maxId + 1;
  }

  static fromJSON(json: TokenizerJson | string, options?: BpeOptions): Tokenizer {
    const parsed: unknown = typeof json === 'string' ? JSON.parse(json) : json;
    if (typeof parsed !== 'object' || parsed === null || !('model' in parsed)) {
      throw new TokenizerConfigError('tokenizer.json must be an object with a "model"');
    }
    return new Tokenizer(parsed as TokenizerJson, options);
  }

  static fromFile(path: string, options?: BpeOptions): Tokenizer {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      throw new TokenizerConfigError(`cannot read ${path}: ${(err as Error).message}`);
    }
    try {
      return Tokenizer.fromJSON(text, options);
    } catch (err) {
      if (err instanceof SyntaxError) throw new TokenizerConfigError(`${path} is not valid JSON: ${err.message}`);
      throw err;
    }
  }

  /** One past the highest id of the model vocab and the added tokens. */
  get vocabSize(): number {
    return this.vocabSizeValue;
  }

  get addedTokens(): readonly AddedToken[] {
    return this.added.tokens;
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    const ids = this.encodeWithoutPostProcessing(text, options.parseSpecialTokens ?? true);
    const add = options.addSpecialTokens ?? true;
    return this.postProcessor === null ? ids : this.postProcessor(ids, null, add);
  }

  encodePair(a: string, b: string, options: EncodeOptions = {}): number[] {
    const parse = options.parseSpecialTokens ?? true;
    const idsA = this.encodeWithoutPostProcessing(a, parse);
    const idsB = this.encodeWithoutPostProcessing(b, parse);
    const add = options.addSpecialTokens ?? true;
    return this.postProcessor === null ? [...idsA, ...idsB] : this.postProcessor(idsA, idsB, add);
  }

  private encodeWithoutPostProcessing(text: string, parseSpecial: boolean): number[] {
    const ids: number[] = [];
    for (const seg of this.added.splitRaw(text, 0, parseSpecial)) {
      if (seg.id !== undefined) { ids.push(seg.id); continue; }
      const normalized = this.normalizer === null ? seg.text : this.normalizer(seg.text);
      for (const sub of this.added.splitNormalized(normalized, seg.start, parseSpecial)) {
        if (sub.id !== undefined) { ids.push(sub.id); continue; }
        if (sub.text.length === 0) continue;
        const start: Piece[] = [{ text: sub.text, first: sub.start === 0 }];
        const pieces = this.preTokenizer === null ? start : this.preTokenizer(start);
        for (const p of pieces) {
          for (const id of this.model.tokenize(p.text)) ids.push(id);
        }
      }
    }
    return ids;
  }

  /** Replaces the post-processor (transformers rebuilds it from add_bos_token / add_eos_token). */
  setPostProcessor(cfg: ComponentConfig | null): void {
    this.postProcessor = cfg === null ? null : buildPostProcessor(cfg);
  }

  /** The token string of an id (added tokens first, like HF), or undefined if unknown. */
  idToToken(id: number): string | undefined {
    return this.added.get(id)?.decoded ?? this.model.idToToken[id];
  }

  tokenToId(token: string): number | undefined {
    return this.added.getByContent(token)?.id ?? this.model.tokenToId(token);
  }

  isSpecialId(id: number): boolean {
    return this.added.isSpecialId(id);
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    const skip = options.skipSpecialTokens ?? false;
    const tokens: string[] = [];
    for (const id of ids) {
      const tok = this.idToToken(id);
      if (tok === undefined) continue;
      if (skip && this.added.isSpecialId(id)) continue;
      tokens.push(tok);
    }
    if (this.decoder === null) return tokens.join(' ');
    return this.decoder(tokens).join('');
  }
}
