// Tokenizer behaviour on hand-made tokenizer.json objects: model options, added tokens, errors.

import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { describe, expect, it } from 'vitest';

import { compileOnigRegex, RegexTranslationError, translateOnigPattern } from '../../src/tokenizer/onig-regex.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import type { TokenizerJson } from '../../src/tokenizer/tokenizer-json.js';
import { Tokenizer } from '../../src/tokenizer/tokenizer.js';

const FIXTURES = fileURLToPath(new URL('../fixtures/tokenizers', import.meta.url));

function tiny(extra: Partial<TokenizerJson> = {}, model: Record<string, unknown> = {}): Tokenizer {
  const vocab: Record<string, number> = { '<unk>': 0, h: 1, e: 2, l: 3, o: 4, he: 5, ll: 6, hell: 7, hello: 8, ' ': 9, '<0xC3>': 10, '<0xA9>': 11, '<|eot|>': 12 };
  return Tokenizer.fromJSON({
    model: { type: 'BPE', vocab, merges: ['h e', 'l l', 'he ll', 'hell o'], unk_token: '<unk>', ...model },
    added_tokens: [{ id: 12, content: '<|eot|>', special: true, normalized: false }],
    ...extra,
  });
}

describe('BPE model', () => {
  it('applies merges given as strings or as pairs identically', () => {
    const a = tiny();
    const b = tiny({}, { merges: [['h', 'e'], ['l', 'l'], ['he', 'll'], ['hell', 'o']] });
    expect(a.encode('hello')).toEqual([8]);
    expect(b.encode('hello')).toEqual([8]);
    expect(a.encode('hell he')).toEqual([7, 9, 5]);
  });

  it('falls back to bytes, then to unk (fused or not)', () => {
    expect(tiny({}, { byte_fallback: true }).encode('hé')).toEqual([1, 10, 11]);
    expect(tiny().encode('hxyz')).toEqual([1, 0, 0, 0]);
    expect(tiny({}, { fuse_unk: true }).encode('hxyz')).toEqual([1, 0]);
  });

  it('ignore_merges takes whole-word vocab hits first', () => {
    const vocab = { a: 0, b: 1, ab: 2, abab: 3, ba: 4 };
    const merges = ['b a', 'a b'];
    const plain = Tokenizer.fromJSON({ model: { type: 'BPE', vocab, merges } });
    const ignore = Tokenizer.fromJSON({ model: { type: 'BPE', vocab, merges, ignore_merges: true } });
    expect(plain.encode('abab')).toEqual([0, 4, 1]);
    expect(ignore.encode('abab')).toEqual([3]);
  });

  it('splits on added tokens unless told to treat them as text', () => {
    const t = tiny();
    expect(t.encode('he<|eot|>he')).toEqual([5, 12, 5]);
    expect(t.encode('he<|eot|>', { parseSpecialTokens: false })).not.toContain(12);
    expect(t.decode([5, 12, 5])).toBe('he <|eot|> he');
    expect(t.decode([5, 12, 5], { skipSpecialTokens: true })).toBe('he he');
    expect(t.isSpecialId(12)).toBe(true);
    expect(t.tokenToId('<|eot|>')).toBe(12);
    expect(t.idToToken(8)).toBe('hello');
    expect(t.vocabSize).toBe(13);
  });

  it('names unsupported component types', () => {
    const base = { model: { type: 'BPE', vocab: { a: 0 }, merges: [] } };
    expect(() => Tokenizer.fromJSON({ model: { type: 'Unigram', vocab: [] } })).toThrow(/unsupported model type "Unigram"/);
    expect(() => Tokenizer.fromJSON({ ...base, normalizer: { type: 'Precompiled' } })).toThrow(/unsupported normalizer type "Precompiled"/);
    expect(() => Tokenizer.fromJSON({ ...base, pre_tokenizer: { type: 'UnicodeScripts' } })).toThrow(/unsupported pre_tokenizer type "UnicodeScripts"/);
    expect(() => Tokenizer.fromJSON({ ...base, decoder: { type: 'CTC' } })).toThrow(/unsupported decoder type "CTC"/);
    expect(() => Tokenizer.fromJSON({ ...base, post_processor: { type: 'Weird' } })).toThrow(/unsupported post_processor type "Weird"/);
    expect(() => Tokenizer.fromJSON({ model: { type: 'BPE', vocab: { a: 0 }, merges: ['a b'] } })).toThrow(/missing from the vocab/);
  });

  it('keeps long inputs off the argument stack', () => {
    const t = tiny({ post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<|eot|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }], special_tokens: { '<|eot|>': { id: '<|eot|>', ids: [12], tokens: ['<|eot|>'] } } } });
    const ids = t.encode('hello '.repeat(200_000));
    expect(ids.length).toBe(400_001);
    expect(ids[0]).toBe(12);
  });
});

describe('tokenizer_config.json handling', () => {
  it('adds BOS per add_bos_token like transformers', () => {
    const b = loadTokenizerDir(join(FIXTURES, 'sentencepiece'));
    expect(b.addBosToken).toBe(true);
    expect(b.bosToken).toBe('<bos>');
    expect(b.tokenizer.encode('hi')[0]).toBe(b.bosTokenId);
    expect(b.tokenizer.encode('hi', { addSpecialTokens: false })[0]).not.toBe(b.bosTokenId);
    expect(b.stopTokenIds.has(b.eosTokenId!)).toBe(true);
  });
});

describe('Oniguruma regex translation', () => {
  const all = (pattern: string, text: string): string[] => [...text.matchAll(compileOnigRegex(pattern))].map((m) => m[0]);

  it('expands scoped case-insensitive groups', () => {
    expect(all("(?i:'s|'ll)|x", "it'S we'Ll X x")).toEqual(["'S", "'Ll", 'x']);
    expect(all('(?i)ab[c-d]', 'ABD abc aBC')).toEqual(['ABD', 'abc', 'aBC']);
  });

  it('emulates possessive quantifiers and atomic groups', () => {
    expect(all('a++a', 'aaaa')).toEqual([]);
    expect(all('a+a', 'aaaa')).toEqual(['aaaa']);
    expect(all('(?>a+)b|a', 'aab aa')).toEqual(['aab', 'a', 'a']);
  });

  it('uses Unicode semantics for \\d \\w \\s and property names', () => {
    expect(all('\\d+', '12 \u0661\u0662 \u00b2')).toEqual(['12', '\u0661\u0662']);
    expect(all('\\s+', 'a\u0085b\ufeffc')).toEqual(['\u0085']);
    expect(all('\\p{Han}+', 'ab\u4e2d\u6587cd')).toEqual(['\u4e2d\u6587']);
    expect(all('.', 'a\rb\n')).toEqual(['a', '\r', 'b']);
  });

  it('rejects constructs without a JS equivalent, naming the pattern', () => {
    expect(() => translateOnigPattern('\\Gx')).toThrow(RegexTranslationError);
    expect(() => translateOnigPattern('[a-z&&[^aeiou]]')).toThrow(/intersection/);
    expect(() => translateOnigPattern('\\p{NotAProperty}')).toThrow(/NotAProperty/);
  });
});
