// Pattern matching and the five HF split behaviours shared by pre-tokenizers, normalizers and decoders.

import { compileOnigRegex } from './onig-regex.js';
import type { PatternConfig } from './tokenizer-json.js';

export type SplitBehavior = 'Removed' | 'Isolated' | 'MergedWithPrevious' | 'MergedWithNext' | 'Contiguous';

export const SPLIT_BEHAVIORS: readonly SplitBehavior[] = ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous'];

/** Half-open [start, end) UTF-16 range. */
export type Span = [number, number];

/** Finds non-overlapping matches left to right. */
export interface Matcher {
  find(text: string): Span[];
}

export class RegexMatcher implements Matcher {
  constructor(private readonly re: RegExp) {
    if (!re.global) throw new Error('RegexMatcher needs a global RegExp');
  }

  find(text: string): Span[] {
    const out: Span[] = [];
    this.re.lastIndex = 0;
    for (const m of text.matchAll(this.re)) {
      const start = m.index;
      out.push([start, start + m[0].length]);
    }
    return out;
  }
}

export class LiteralMatcher implements Matcher {
  constructor(private readonly literal: string) {}

  find(text: string): Span[] {
    const out: Span[] = [];
    if (this.literal === '') return out;
    let i = text.indexOf(this.literal);
    while (i >= 0) {
      out.push([i, i + this.literal.length]);
      i = text.indexOf(this.literal, i + this.literal.length);
    }
    return out;
  }
}

export function matcherFromPattern(pattern: PatternConfig): Matcher {
  if ('String' in pattern) return new LiteralMatcher(pattern.String);
  return new RegexMatcher(compileOnigRegex(pattern.Regex));
}

/** A matcher where every single character satisfying the class is its own match. */
export function charClassMatcher(classSource: string): Matcher {
  return new RegexMatcher(new RegExp(classSource, 'gu'));
}

/** Replaces every match of `pattern` with the literal `content` (no $-substitution, like HF). */
export function replaceAll(text: string, matcher: Matcher, content: string): string {
  const spans = matcher.find(text);
  if (spans.length === 0) return text;
  let out = '';
  let prev = 0;
  for (const [s, e] of spans) {
    out += text.slice(prev, s) + content;
    prev = e;
  }
  return out + text.slice(prev);
}

/**
 * Splits text per HF's NormalizedString::split: matches cover the string together with the gaps,
 * then the behaviour decides what is kept and what is glued together. Empty pieces are dropped.
 */
export function splitSpans(text: string, matcher: Matcher, behavior: SplitBehavior, invert = false): Span[] {
  const parts: Array<[Span, boolean]> = [];
  if (text.length === 0) return [];
  let prev = 0;
  for (const [s, e] of matcher.find(text)) {
    if (prev !== s) parts.push([[prev, s], invert]);
    parts.push([[s, e], !invert]);
    prev = e;
  }
  if (prev !== text.length) parts.push([[prev, text.length], invert]);

  const kept: Array<[Span, boolean]> = []; // [span, remove]
  switch (behavior) {
    case 'Isolated':
      for (const [span] of parts) kept.push([span, false]);
      break;
    case 'Removed':
      for (const p of parts) kept.push(p);
      break;
    case 'Contiguous': {
      let previous = false;
      for (const [span, isMatch] of parts) {
        const last = kept[kept.length - 1];
        if (isMatch === previous && last !== undefined) last[0] = [last[0][0], span[1]];
        else kept.push([span, false]);
        previous = isMatch;
      }
      break;
    }
    case 'MergedWithPrevious': {
      let previous = false;
      for (const [span, isMatch] of parts) {
        const last = kept[kept.length - 1];
        if (isMatch && !previous && last !== undefined) last[0] = [last[0][0], span[1]];
        else kept.push([span, false]);
        previous = isMatch;
      }
      break;
    }
    case 'MergedWithNext': {
      let previous = false;
      for (let i = parts.length - 1; i >= 0; i--) {
        const [span, isMatch] = parts[i]!;
        const last = kept[kept.length - 1];
        if (isMatch && !previous && last !== undefined) last[0] = [span[0], last[0][1]];
        else kept.push([span, false]);
        previous = isMatch;
      }
      kept.reverse();
      break;
    }
  }
  const out: Span[] = [];
  for (const [span, remove] of kept) if (!remove && span[1] > span[0]) out.push(span);
  return out;
}

