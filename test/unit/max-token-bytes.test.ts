// The bytes-per-token bound behind the context check by bytes: true for every text of the fixtures'
// tokenizers, and absent where the pipeline can drop text.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Tokenizer } from '../../src/tokenizer/tokenizer.js';
import { maxBytesPerToken } from '../../src/tokenizer/max-token-bytes.js';
import type { TokenizerJson } from '../../src/tokenizer/tokenizer-json.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';

const TEXTS = [
  'plain English text with spaces     and runs of spaces',
  '你好，世界！今天天气很好。'.repeat(20),
  '각'.repeat(50) + ' decomposed Hangul jamo that NFC composes',
  '🙂🙃'.repeat(40) + ' <|im_start|><|im_end|>',
  '==========='.repeat(30),
  '\n\n\n\t\t  \u00a0\u2028 ' + 'K'.repeat(30),
];

describe('maxBytesPerToken', () => {
  for (const name of ['qwen2-f32', 'llama-f32', 'gemma3-f32']) {
    it(`bounds the bytes of every token of ${name}`, () => {
      const raw = readFileSync(join(FIXTURE_ROOT, name, 'tokenizer.json'), 'utf8');
      const bound = maxBytesPerToken(JSON.parse(raw) as TokenizerJson);
      expect(bound).not.toBeNull();
      const tok = Tokenizer.fromJSON(raw);
      for (const t of TEXTS) {
        const ids = tok.encode(t, { addSpecialTokens: false });
        expect(Buffer.byteLength(t)).toBeLessThanOrEqual(ids.length * bound!);
      }
    });
  }

  it('has no bound when the pipeline can drop text', () => {
    const base: TokenizerJson = { model: { type: 'BPE', vocab: { a: 0 }, merges: [] } };
    expect(maxBytesPerToken(base)).toBe(4);
    expect(maxBytesPerToken({ ...base, pre_tokenizer: { type: 'WhitespaceSplit' } })).toBeNull();
    expect(maxBytesPerToken({ ...base, normalizer: { type: 'Strip' } })).toBeNull();
    expect(maxBytesPerToken({ ...base, model: { ...base.model, unk_token: '<unk>', fuse_unk: true } })).toBeNull();
    expect(maxBytesPerToken({ ...base, normalizer: { type: 'NFC' } })).toBe(12);
  });
});
