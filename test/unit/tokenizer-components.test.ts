// Component-level parity with the reference HF `tokenizers` library: normalizers, pre-tokenizers
// (including the Oniguruma -> JS regex translation), decoders and small complete tokenizers.
// Expected values come from tokenizer-components.gen.py.

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { describe, expect, it } from 'vitest';

import { StreamingDetokenizer } from '../../src/engine/detokenizer.js';
import { buildDecoder } from '../../src/tokenizer/decoders.js';
import { buildNormalizer } from '../../src/tokenizer/normalizers.js';
import { buildPreTokenizer } from '../../src/tokenizer/pre-tokenizers.js';
import type { ComponentConfig, TokenizerJson } from '../../src/tokenizer/tokenizer-json.js';
import { Tokenizer } from '../../src/tokenizer/tokenizer.js';

interface Expected {
  normalizers: Array<{ config: ComponentConfig; cases: Array<[string, string]> }>;
  pre_tokenizers: Array<{ config: ComponentConfig; cases: Array<[string, string[]]> }>;
  decoders: Array<{ config: ComponentConfig; cases: Array<[string[], string]> }>;
  tokenizers: Array<{
    name: string;
    tokenizer: TokenizerJson;
    cases: Array<{ text: string; ids: number[]; ids_special: number[]; decoded: string; decoded_skip: string }>;
  }>;
}

const expected = JSON.parse(readFileSync(fileURLToPath(new URL('tokenizer-components.expected.json', import.meta.url)), 'utf8')) as Expected;

const label = (cfg: ComponentConfig): string => JSON.stringify(cfg).slice(0, 160);

describe('normalizers match the reference', () => {
  for (const { config, cases } of expected.normalizers) {
    it(label(config), () => {
      const n = buildNormalizer(config);
      for (const [input, output] of cases) expect([input, n(input)]).toEqual([input, output]);
    });
  }
});

describe('pre-tokenizers match the reference', () => {
  for (const { config, cases } of expected.pre_tokenizers) {
    it(label(config), () => {
      const p = buildPreTokenizer(config);
      for (const [input, pieces] of cases) {
        expect([input, p([{ text: input, first: true }]).map((x) => x.text)]).toEqual([input, pieces]);
      }
    });
  }
});

describe('decoders match the reference', () => {
  for (const { config, cases } of expected.decoders) {
    it(label(config), () => {
      const d = buildDecoder(config);
      for (const [tokens, text] of cases) expect([tokens, d(tokens).join('')]).toEqual([tokens, text]);
    });
  }
});

describe('small tokenizers match the reference', () => {
  for (const { name, tokenizer, cases } of expected.tokenizers) {
    it(name, () => {
      const tok = Tokenizer.fromJSON(tokenizer);
      for (const c of cases) {
        expect([c.text, tok.encode(c.text, { addSpecialTokens: false })]).toEqual([c.text, c.ids]);
        expect([c.text, tok.encode(c.text)]).toEqual([c.text, c.ids_special]);
        expect([c.text, tok.decode(c.ids_special)]).toEqual([c.text, c.decoded]);
        expect([c.text, tok.decode(c.ids_special, { skipSpecialTokens: true })]).toEqual([c.text, c.decoded_skip]);
      }
    });
  }

  it('streams them exactly too', () => {
    for (const { name, tokenizer, cases } of expected.tokenizers) {
      const tok = Tokenizer.fromJSON(tokenizer);
      for (const c of cases) {
        for (const skip of [false, true]) {
          const d = new StreamingDetokenizer(tok, { skipSpecialTokens: skip });
          const text = c.ids_special.map((id) => d.push(id)).join('') + d.flush();
          expect([name, c.text, skip, text]).toEqual([name, c.text, skip, skip ? c.decoded_skip : c.decoded]);
        }
      }
    }
  });
});
