// tokenizer.json pre-tokenizers: split normalized text into words that the model encodes separately.

import { toByteLevel } from './byte-level-alphabet.js';
import { compileOnigRegex, escapeRegexLiteral, WHITESPACE_CLASS_BODY, WORD_CLASS_BODY } from './onig-regex.js';
import {
  charClassMatcher, type Matcher, matcherFromPattern, RegexMatcher, SPLIT_BEHAVIORS, type SplitBehavior, splitSpans,
} from './split-pattern.js';
import {
  type ComponentConfig, fieldBool, fieldComponents, fieldPattern, fieldString, TokenizerConfigError, unsupported,
} from './tokenizer-json.js';

/** A word in the making; `first` marks a piece that starts at offset 0 of the original input. */
export interface Piece {
  text: string;
  first: boolean;
}

export type PreTokenizer = (pieces: Piece[]) => Piece[];

/** GPT-2's word regex as used by the ByteLevel pre-tokenizer (Oniguruma syntax). */
export const GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// char::is_ascii_punctuation || Unicode punctuation (P*), as Rust's Punctuation pre-tokenizer uses.
const PUNCTUATION_CLASS = '[\\p{P}!-\\/:-@\\[-`{-~]';

function splitPieces(pieces: Piece[], matcher: Matcher, behavior: SplitBehavior, invert = false): Piece[] {
  const out: Piece[] = [];
  for (const p of pieces) {
    for (const [s, e] of splitSpans(p.text, matcher, behavior, invert)) {
      out.push({ text: p.text.slice(s, e), first: p.first && s === 0 });
    }
  }
  return out;
}

function behaviorField(cfg: ComponentConfig, fallback: SplitBehavior): SplitBehavior {
  const b = cfg['behavior'];
  if (b === undefined || b === null) return fallback;
  if (typeof b === 'string' && (SPLIT_BEHAVIORS as readonly string[]).includes(b)) return b as SplitBehavior;
  throw new TokenizerConfigError(`unsupported split behavior ${JSON.stringify(b)} in ${cfg.type}`);
}

function metaspace(cfg: ComponentConfig): PreTokenizer {
  const replacement = fieldString(cfg, 'replacement', '\u2581');
  const scheme = prependScheme(cfg);
  const split = fieldBool(cfg, 'split', true);
  const matcher = charClassMatcher(`[${escapeRegexLiteral(replacement)}]`);
  return (pieces) => {
    const out: Piece[] = [];
    for (const p of pieces) {
      if (p.text.length === 0) continue;
      let text = p.text.split(' ').join(replacement);
      if (!text.startsWith(replacement) && (scheme === 'always' || (scheme === 'first' && p.first))) {
        text = replacement + text;
      }
      const piece = { text, first: p.first };
      if (split) for (const q of splitPieces([piece], matcher, 'MergedWithNext')) out.push(q);
      else if (text.length > 0) out.push(piece);
    }
    return out;
  };
}

/** Metaspace's prepend_scheme, falling back to the legacy add_prefix_space flag. */
export function prependScheme(cfg: ComponentConfig): 'always' | 'first' | 'never' {
  const s = cfg['prepend_scheme'];
  if (s === 'always' || s === 'first' || s === 'never') return s;
  if (s !== undefined && s !== null) throw new TokenizerConfigError(`unsupported Metaspace prepend_scheme ${JSON.stringify(s)}`);
  return fieldBool(cfg, 'add_prefix_space', true) ? 'always' : 'never';
}

export function buildPreTokenizer(cfg: ComponentConfig): PreTokenizer {
  switch (cfg.type) {
    case 'ByteLevel': {
      const addPrefixSpace = fieldBool(cfg, 'add_prefix_space', true);
      const useRegex = fieldBool(cfg, 'use_regex', true);
      const matcher = new RegexMatcher(compileOnigRegex(GPT2_PATTERN));
      return (pieces) => {
        // Prepending to an empty piece is a no-op in HF, and empty pieces are dropped.
        let cur = pieces.filter((p) => p.text.length > 0);
        if (addPrefixSpace) cur = cur.map((p) => (p.text.startsWith(' ') ? p : { text: ` ${p.text}`, first: p.first }));
        if (useRegex) cur = splitPieces(cur, matcher, 'Isolated');
        return cur.map((p) => ({ text: toByteLevel(p.text), first: p.first }));
      };
    }
    case 'Split': {
      const matcher = matcherFromPattern(fieldPattern(cfg));
      const behavior = behaviorField(cfg, 'Isolated');
      const invert = fieldBool(cfg, 'invert', false);
      return (pieces) => splitPieces(pieces, matcher, behavior, invert);
    }
    case 'Metaspace':
      return metaspace(cfg);
    case 'Digits': {
      const individual = fieldBool(cfg, 'individual_digits', false);
      const matcher = charClassMatcher('\\p{N}');
      return (pieces) => splitPieces(pieces, matcher, individual ? 'Isolated' : 'Contiguous');
    }
    case 'Whitespace': {
      const matcher = new RegexMatcher(new RegExp(`[${WORD_CLASS_BODY}]+|[^${WORD_CLASS_BODY}${WHITESPACE_CLASS_BODY}]+`, 'gu'));
      return (pieces) => splitPieces(pieces, matcher, 'Removed', true);
    }
    case 'WhitespaceSplit': {
      const matcher = charClassMatcher(`[${WHITESPACE_CLASS_BODY}]`);
      return (pieces) => splitPieces(pieces, matcher, 'Removed');
    }
    case 'Punctuation': {
      const matcher = charClassMatcher(PUNCTUATION_CLASS);
      const behavior = behaviorField(cfg, 'Isolated');
      return (pieces) => splitPieces(pieces, matcher, behavior);
    }
    case 'BertPreTokenizer': {
      const ws = charClassMatcher(`[${WHITESPACE_CLASS_BODY}]`);
      const punct = charClassMatcher(PUNCTUATION_CLASS);
      return (pieces) => splitPieces(splitPieces(pieces, ws, 'Removed'), punct, 'Isolated');
    }
    case 'CharDelimiterSplit': {
      const matcher = charClassMatcher(`[${escapeRegexLiteral(fieldString(cfg, 'delimiter'))}]`);
      return (pieces) => splitPieces(pieces, matcher, 'Removed');
    }
    case 'Sequence': {
      const steps = fieldComponents(cfg, 'pretokenizers').map(buildPreTokenizer);
      return (pieces) => steps.reduce((acc, step) => step(acc), pieces);
    }
    default:
      throw unsupported('pre_tokenizer', cfg.type);
  }
}
