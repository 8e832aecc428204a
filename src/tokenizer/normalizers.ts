// tokenizer.json normalizers: text -> text transforms applied to each piece between added tokens.

import { WHITESPACE_CLASS_BODY } from './onig-regex.js';
import { matcherFromPattern, replaceAll } from './split-pattern.js';
import {
  type ComponentConfig, fieldBool, fieldComponents, fieldPattern, fieldString, unsupported,
} from './tokenizer-json.js';

export type Normalizer = (text: string) => string;

const LEADING_WS = new RegExp(`^[${WHITESPACE_CLASS_BODY}]+`, 'u');
const TRAILING_WS = new RegExp(`[${WHITESPACE_CLASS_BODY}]+$`, 'u');
const COMBINING_MARKS = /\p{M}/gu;
const CONTROL_CHARS = /[\p{Cc}\p{Cf}]/u;
const CJK = /[\u4E00-\u9FFF\u3400-\u4DBF\u{20000}-\u{2A6DF}\u{2A700}-\u{2B73F}\u{2B740}-\u{2B81F}\u{2B820}-\u{2CEAF}\uF900-\uFAFF\u{2F800}-\u{2FA1F}]/u;

function bertNormalizer(cfg: ComponentConfig): Normalizer {
  const cleanText = fieldBool(cfg, 'clean_text', true);
  const chinese = fieldBool(cfg, 'handle_chinese_chars', true);
  const lowercase = fieldBool(cfg, 'lowercase', true);
  const stripAccentsRaw = cfg['strip_accents'];
  const stripAccents = stripAccentsRaw === null || stripAccentsRaw === undefined ? lowercase : stripAccentsRaw === true;
  return (text) => {
    let out = '';
    for (const ch of text) {
      const cp = ch.codePointAt(0)!;
      if (cleanText) {
        if (cp === 0 || cp === 0xfffd) continue;
        if (ch === '\t' || ch === '\n' || ch === '\r') { out += ' '; continue; }
        if (CONTROL_CHARS.test(ch)) continue;
        if (/\s/u.test(ch)) { out += ' '; continue; }
      }
      if (chinese && CJK.test(ch)) { out += ` ${ch} `; continue; }
      out += ch;
    }
    if (stripAccents) out = out.normalize('NFD').replace(COMBINING_MARKS, '');
    if (lowercase) out = out.toLowerCase();
    return out;
  };
}

export function buildNormalizer(cfg: ComponentConfig): Normalizer {
  switch (cfg.type) {
    case 'NFC': return (t) => t.normalize('NFC');
    case 'NFD': return (t) => t.normalize('NFD');
    case 'NFKC': return (t) => t.normalize('NFKC');
    case 'NFKD': return (t) => t.normalize('NFKD');
    case 'Lowercase': return (t) => t.toLowerCase();
    case 'StripAccents': return (t) => t.replace(COMBINING_MARKS, '');
    case 'Prepend': {
      const prepend = fieldString(cfg, 'prepend');
      return (t) => (t.length === 0 ? t : prepend + t);
    }
    case 'Append': {
      const append = fieldString(cfg, 'append');
      return (t) => (t.length === 0 ? t : t + append);
    }
    case 'Replace': {
      const matcher = matcherFromPattern(fieldPattern(cfg));
      const content = fieldString(cfg, 'content');
      return (t) => replaceAll(t, matcher, content);
    }
    case 'Strip': {
      const left = fieldBool(cfg, 'strip_left', true);
      const right = fieldBool(cfg, 'strip_right', true);
      return (t) => {
        let out = t;
        if (left) out = out.replace(LEADING_WS, '');
        if (right) out = out.replace(TRAILING_WS, '');
        return out;
      };
    }
    case 'BertNormalizer': return bertNormalizer(cfg);
    case 'Sequence': {
      const steps = fieldComponents(cfg, 'normalizers').map(buildNormalizer);
      return (t) => steps.reduce((acc, n) => n(acc), t);
    }
    default:
      throw unsupported('normalizer', cfg.type);
  }
}
