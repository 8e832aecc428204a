// Added tokens (special and user tokens) are matched on the raw or normalized text before the model
// runs, with HF's leftmost-longest matching and single_word / lstrip / rstrip rules.

import { WHITESPACE_CLASS_BODY, WORD_CLASS_BODY } from './onig-regex.js';
import type { AddedTokenConfig } from './tokenizer-json.js';

export interface AddedToken {
  id: number;
  content: string;
  singleWord: boolean;
  lstrip: boolean;
  rstrip: boolean;
  normalized: boolean;
  special: boolean;
  /** What decode() shows: HF stores normalized tokens in their normalized form. */
  decoded: string;
}

/** A slice of text, either plain (id undefined) or a matched added token. */
export interface Segment {
  text: string;
  start: number;
  id?: number;
}

interface TrieNode {
  children: Map<number, TrieNode>;
  token?: AddedToken;
}

const IS_WS = new RegExp(`^[${WHITESPACE_CLASS_BODY}]$`, 'u');
const IS_WORD = new RegExp(`^[${WORD_CLASS_BODY}]$`, 'u');

/** The character (code point) ending just before index `end`. */
function charBefore(s: string, end: number): string {
  if (end <= 0) return '';
  const unit = s.charCodeAt(end - 1);
  // A low surrogate belongs to a pair starting one unit earlier.
  if (unit >= 0xdc00 && unit <= 0xdfff && end >= 2) return s.slice(end - 2, end);
  return s.slice(end - 1, end);
}

/** The character (code point) starting at index `start`. */
function charAt(s: string, start: number): string {
  const cp = s.codePointAt(start);
  return cp === undefined ? '' : String.fromCodePoint(cp);
}

/** Leftmost-longest literal matcher over UTF-16 code units. */
class TokenTrie {
  private readonly root: TrieNode = { children: new Map() };
  private size = 0;

  add(token: AddedToken, key: string): void {
    if (key.length === 0) return;
    let node = this.root;
    for (let i = 0; i < key.length; i++) {
      const c = key.charCodeAt(i);
      let child = node.children.get(c);
      if (child === undefined) {
        child = { children: new Map() };
        node.children.set(c, child);
      }
      node = child;
    }
    node.token = token;
    this.size++;
  }

  get empty(): boolean {
    return this.size === 0;
  }

  /** Longest token matching at `pos`, as [token, end]. */
  matchAt(text: string, pos: number): [AddedToken, number] | null {
    let node: TrieNode | undefined = this.root;
    let best: [AddedToken, number] | null = null;
    for (let i = pos; i < text.length; i++) {
      node = node.children.get(text.charCodeAt(i));
      if (node === undefined) break;
      if (node.token !== undefined) best = [node.token, i + 1];
    }
    return best;
  }

  hasStart(code: number): boolean {
    return this.root.children.has(code);
  }
}

export class AddedVocabulary {
  readonly tokens: AddedToken[];
  private readonly byId = new Map<number, AddedToken>();
  private readonly byContent = new Map<string, AddedToken>();
  private readonly rawTrie = new TokenTrie();
  private readonly normalizedTrie = new TokenTrie();

  constructor(configs: readonly AddedTokenConfig[], normalize: ((s: string) => string) | null) {
    this.tokens = configs.map((t) => ({
      id: t.id,
      content: t.content,
      singleWord: t.single_word ?? false,
      lstrip: t.lstrip ?? false,
      rstrip: t.rstrip ?? false,
      special: t.special ?? false,
      normalized: t.normalized ?? !(t.special ?? false),
      decoded: t.content,
    }));
    for (const t of this.tokens) {
      this.byId.set(t.id, t);
      this.byContent.set(t.content, t);
      if (t.normalized) {
        t.decoded = normalize === null ? t.content : normalize(t.content);
        this.normalizedTrie.add(t, t.decoded);
      } else {
        this.rawTrie.add(t, t.content);
      }
    }
  }

  get(id: number): AddedToken | undefined {
    return this.byId.get(id);
  }

  getByContent(content: string): AddedToken | undefined {
    return this.byContent.get(content);
  }

  isSpecialId(id: number): boolean {
    return this.byId.get(id)?.special === true;
  }

  /** Splits on tokens that match the raw text (normalized: false). */
  splitRaw(text: string, start: number, parseSpecial: boolean): Segment[] {
    return this.split(this.rawTrie, text, start, parseSpecial);
  }

  /** Splits an already-normalized piece on tokens that match normalized text. */
  splitNormalized(text: string, start: number, parseSpecial: boolean): Segment[] {
    return this.split(this.normalizedTrie, text, start, parseSpecial);
  }

  private split(trie: TokenTrie, text: string, base: number, parseSpecial: boolean): Segment[] {
    if (trie.empty || text.length === 0) return [{ text, start: base }];
    const out: Segment[] = [];
    let startOffset = 0;
    let i = 0;
    while (i < text.length) {
      if (!trie.hasStart(text.charCodeAt(i))) { i++; continue; }
      const m = trie.matchAt(text, i);
      if (m === null) { i++; continue; }
      const [token, matchEnd] = m;
      let start = i;
      let stop = matchEnd;
      i = matchEnd;
      if (!parseSpecial && token.special) continue;
      if (token.singleWord) {
        const startSpace = start === 0 || !IS_WORD.test(charBefore(text, start));
        const stopSpace = stop === text.length || !IS_WORD.test(charAt(text, stop));
        if (!startSpace || !stopSpace) continue;
      }
      if (token.lstrip) {
        let s = start;
        while (s > 0) {
          const ch = charBefore(text, s);
          if (!IS_WS.test(ch)) break;
          s -= ch.length;
        }
        start = Math.max(s, startOffset);
      }
      if (token.rstrip) {
        while (stop < text.length) {
          const ch = charAt(text, stop);
          if (!IS_WS.test(ch)) break;
          stop += ch.length;
        }
      }
      if (startOffset < start) out.push({ text: text.slice(startOffset, start), start: base + startOffset });
      out.push({ text: text.slice(start, stop), start: base + start, id: token.id });
      startOffset = stop;
    }
    if (startOffset !== text.length) out.push({ text: text.slice(startOffset), start: base + startOffset });
    return out;
  }
}
