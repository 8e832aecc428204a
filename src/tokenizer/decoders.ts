// tokenizer.json decoders: each maps a list of token strings to a new list (HF's decode_chain);
// the final text is the concatenation.

import { CHAR_TO_BYTE } from './byte-level-alphabet.js';
import { prependScheme } from './pre-tokenizers.js';
import { matcherFromPattern, replaceAll } from './split-pattern.js';
import {
  type ComponentConfig, fieldBool, fieldComponents, fieldNumber, fieldPattern, fieldString, unsupported,
} from './tokenizer-json.js';

export type Decoder = (tokens: string[]) => string[];

const utf8Lossy = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
const utf8Strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const encoder = new TextEncoder();

/** Byte-level tokens back to bytes; a token with a character outside the alphabet keeps its own UTF-8. */
function byteLevelDecode(tokens: string[]): string[] {
  const bytes: number[] = [];
  for (const t of tokens) {
    const mark = bytes.length;
    let ok = true;
    for (const ch of t) {
      const b = CHAR_TO_BYTE.get(ch);
      if (b === undefined) { ok = false; break; }
      bytes.push(b);
    }
    if (!ok) {
      bytes.length = mark;
      for (const b of encoder.encode(t)) bytes.push(b);
    }
  }
  return [utf8Lossy.decode(Uint8Array.from(bytes))];
}

function parseByteToken(token: string): number | null {
  if (token.length !== 6 || !token.startsWith('<0x') || !token.endsWith('>')) return null;
  const hex = token.slice(3, 5);
  if (!/^[0-9a-fA-F]{2}$/.test(hex)) return null;
  return parseInt(hex, 16);
}

/** True for `<0xNN>` byte-fallback token strings. */
export function isByteFallbackToken(token: string): boolean {
  return parseByteToken(token) !== null;
}

function byteFallbackDecode(tokens: string[]): string[] {
  const out: string[] = [];
  let pending: number[] = [];
  const flush = (): void => {
    if (pending.length === 0) return;
    try {
      out.push(utf8Strict.decode(Uint8Array.from(pending)));
    } catch {
      // HF emits one replacement character per byte when the run is not valid UTF-8.
      for (let i = 0; i < pending.length; i++) out.push('\uFFFD');
    }
    pending = [];
  };
  for (const t of tokens) {
    const b = parseByteToken(t);
    if (b !== null) pending.push(b);
    else {
      flush();
      out.push(t);
    }
  }
  flush();
  return out;
}

function wordPieceCleanup(s: string): string {
  return s
    .replaceAll(' .', '.').replaceAll(' ?', '?').replaceAll(' !', '!').replaceAll(' ,', ',')
    .replaceAll(" ' ", "'").replaceAll(" n't", "n't").replaceAll(" 'm", "'m").replaceAll(' do not', " don't")
    .replaceAll(" 's", "'s").replaceAll(" 've", "'ve").replaceAll(" 're", "'re");
}

export function buildDecoder(cfg: ComponentConfig): Decoder {
  switch (cfg.type) {
    case 'ByteLevel':
      return byteLevelDecode;
    case 'ByteFallback':
      return byteFallbackDecode;
    case 'Fuse':
      return (tokens) => [tokens.join('')];
    case 'Metaspace': {
      const replacement = fieldString(cfg, 'replacement', '\u2581');
      const stripFirst = prependScheme(cfg) !== 'never';
      return (tokens) => tokens.map((t, i) => {
        if (i === 0 && stripFirst) return t.split(replacement).join('');
        return t.split(replacement).join(' ');
      });
    }
    case 'Replace': {
      const matcher = matcherFromPattern(fieldPattern(cfg));
      const content = fieldString(cfg, 'content');
      return (tokens) => tokens.map((t) => replaceAll(t, matcher, content));
    }
    case 'Strip': {
      const content = fieldString(cfg, 'content');
      const start = fieldNumber(cfg, 'start', 0);
      const stop = fieldNumber(cfg, 'stop', 0);
      return (tokens) => tokens.map((t) => {
        const chars = Array.from(t);
        let startCut = 0;
        for (let i = 0; i < Math.min(start, chars.length); i++) {
          if (chars[i] === content) startCut = i + 1;
          else break;
        }
        let stopCut = chars.length;
        for (let i = 0; i < Math.min(stop, chars.length); i++) {
          const idx = chars.length - i - 1;
          if (chars[idx] === content) stopCut = idx;
          else break;
        }
        return chars.slice(startCut, Math.max(startCut, stopCut)).join('');
      });
    }
    case 'WordPiece': {
      const prefix = fieldString(cfg, 'prefix', '##');
      const cleanup = fieldBool(cfg, 'cleanup', true);
      return (tokens) => tokens.map((t, i) => {
        let out = t;
        if (i !== 0) out = out.startsWith(prefix) ? out.slice(prefix.length) : ` ${out}`;
        return cleanup ? wordPieceCleanup(out) : out;
      });
    }
    case 'BPEDecoder': {
      const suffix = fieldString(cfg, 'suffix', '</w>');
      return (tokens) => tokens.map((t, i) => t.split(suffix).join(i === tokens.length - 1 ? '' : ' '));
    }
    case 'Sequence': {
      const steps = fieldComponents(cfg, 'decoders').map(buildDecoder);
      return (tokens) => steps.reduce((acc, d) => d(acc), tokens);
    }
    default:
      throw unsupported('decoder', cfg.type);
  }
}
