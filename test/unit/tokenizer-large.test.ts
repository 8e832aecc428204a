// 1 MB of mixed text (CJK, emoji, code, special tokens) encodes and round-trips, and the BPE word
// cache never changes results. Speed is measured by benchmarks, not asserted here.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { expect, it } from 'vitest';

import { Tokenizer } from '../../src/tokenizer/tokenizer.js';

const FIXTURES = fileURLToPath(new URL('../fixtures/tokenizers', import.meta.url));

for (const kind of ['bytelevel', 'sentencepiece']) {
  it(`${kind}: encodes 1 MB of mixed text deterministically and round-trips it`, () => {
    const cases = (JSON.parse(readFileSync(join(FIXTURES, kind, 'cases.json'), 'utf8')) as { cases: Array<{ text: string }> }).cases;
    const corpus = cases.map((c) => c.text).join('\n');
    let text = '';
    for (let i = 0; text.length < 1_000_000; i++) text += `${corpus}\n#${i} ${i * 7919}\n`;
    text = text.slice(0, 1_000_000);
    const tok = Tokenizer.fromFile(join(FIXTURES, kind, 'tokenizer.json'));
    const ids = tok.encode(text);
    expect(ids.length).toBeGreaterThan(100_000);
    // A fresh tokenizer (cold cache) gives the same ids on a slice.
    const slice = text.slice(0, 50_000);
    expect(Tokenizer.fromFile(join(FIXTURES, kind, 'tokenizer.json')).encode(slice)).toEqual(tok.encode(slice));
    expect(tok.decode(ids, { skipSpecialTokens: false })).toBe(tok.decode(tok.encode(text)));
  }, 30000);
}
