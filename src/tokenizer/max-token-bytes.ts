// An upper bound on the UTF-8 bytes of input text one token can stand for, so a text whose byte count
// exceeds contextLength x bound is known to be too long without tokenizing it. null when the pipeline
// can drop text (the text could then be any length in tokens) and no such bound exists.

import type { ComponentConfig, TokenizerJson } from './tokenizer-json.js';

/** Normalizers that may shrink text by at most this factor (NFC composes up to 3 Hangul jamo into 1
 * syllable, 9 bytes -> 3; lowercasing maps the 3-byte Kelvin sign to "k"). */
const SHRINK: Record<string, number> = { NFC: 3, NFD: 1, NFKC: 3, NFKD: 3, Lowercase: 3, Prepend: 1, Append: 1 };

/** How much `cfg` may shrink text (1 = never), or null when it can drop text outright. */
function shrinkFactor(cfg: ComponentConfig | null | undefined): number | null {
  if (cfg === null || cfg === undefined) return 1;
  if (cfg.type === 'Sequence') {
    let f = 1;
    for (const c of Array.isArray(cfg.normalizers) ? (cfg.normalizers as ComponentConfig[]) : []) {
      const g = shrinkFactor(c);
      if (g === null) return null;
      f *= g;
    }
    return f;
  }
  if (cfg.type === 'Replace') {
    // A literal replaced by a non-empty literal (SentencePiece's " " -> "▁") shrinks by their ratio.
    const pattern = cfg.pattern as { String?: unknown } | undefined;
    const from = typeof pattern?.String === 'string' ? Buffer.byteLength(pattern.String) : 0;
    const to = typeof cfg.content === 'string' ? Buffer.byteLength(cfg.content) : 0;
    return from > 0 && to > 0 ? Math.max(1, from / to) : null;
  }
  return SHRINK[cfg.type] ?? null; // StripAccents, Strip, BertNormalizer, ...: can remove text
}

/** Whether a pre-tokenizer can remove text (whitespace splitters drop the separators). */
function dropsText(cfg: ComponentConfig | null | undefined): boolean {
  if (cfg === null || cfg === undefined) return false;
  if (cfg.type === 'Sequence') return (Array.isArray(cfg.pretokenizers) ? (cfg.pretokenizers as ComponentConfig[]) : []).some(dropsText);
  if (cfg.type === 'Split') return cfg.behavior === 'Removed';
  return ['Whitespace', 'WhitespaceSplit', 'BertPreTokenizer', 'CharDelimiterSplit'].includes(cfg.type);
}

function usesByteLevel(cfg: ComponentConfig | null | undefined): boolean {
  if (cfg === null || cfg === undefined) return false;
  if (cfg.type === 'ByteLevel') return true;
  const parts = cfg.pretokenizers ?? cfg.decoders;
  return Array.isArray(parts) && (parts as ComponentConfig[]).some(usesByteLevel);
}

/** Bytes of input text one token covers at most, or null when the tokenizer has no such bound. */
export function maxBytesPerToken(json: TokenizerJson): number | null {
  const model = json.model;
  const shrink = shrinkFactor(json.normalizer);
  if (shrink === null || dropsText(json.pre_tokenizer)) return null;
  // A fused unknown run is one token for any number of characters.
  if (model.fuse_unk === true && model.byte_fallback !== true && typeof model.unk_token === 'string') return null;
  // Byte-level vocab strings spell one byte per character; other vocabs are counted in UTF-8 (an
  // overestimate for "▁" and "<0x41>", which is safe).
  const byteLevel = usesByteLevel(json.pre_tokenizer) || usesByteLevel(json.decoder);
  let longest = 4; // an unknown character becomes one token of up to 4 bytes
  const vocab = model.vocab;
  const tokens = Array.isArray(vocab) ? vocab.map((e) => (Array.isArray(e) ? String(e[0]) : '')) : Object.keys((vocab ?? {}) as object);
  for (const t of tokens) longest = Math.max(longest, byteLevel ? t.length : Buffer.byteLength(t));
  for (const a of json.added_tokens ?? []) longest = Math.max(longest, Buffer.byteLength(a.content));
  return Math.ceil(longest * shrink);
}
