// Streaming detokenization must reproduce tokenizer.decode exactly, whatever the chunking,
// and never emit a partial UTF-8 character.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { describe, expect, it } from 'vitest';

import { createRng } from '../../src/bench/sweep/rng.js';
import { StreamingDetokenizer } from '../../src/engine/detokenizer.js';
import { Tokenizer } from '../../src/tokenizer/tokenizer.js';
import type { TokenizerJson } from '../../src/tokenizer/tokenizer-json.js';

interface CasesFile {
  cases: Array<{ text: string; ids: number[]; ids_special: number[] }>;
  decode_cases: Array<{ ids: number[] }>;
}

const FIXTURES = fileURLToPath(new URL('../fixtures/tokenizers', import.meta.url));

function stream(tok: Tokenizer, ids: readonly number[], skipSpecialTokens: boolean): string[] {
  const d = new StreamingDetokenizer(tok, { skipSpecialTokens });
  const deltas = ids.map((id) => d.push(id));
  deltas.push(d.flush());
  return deltas;
}

function hasLoneSurrogate(s: string): boolean {
  return /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s);
}

for (const kind of ['bytelevel', 'sentencepiece']) {
  describe(`streaming detokenizer: ${kind}`, () => {
    const tok = Tokenizer.fromFile(join(FIXTURES, kind, 'tokenizer.json'));
    const file = JSON.parse(readFileSync(join(FIXTURES, kind, 'cases.json'), 'utf8')) as CasesFile;

    it('deltas concatenate to decode() on every parity case, both skip modes', () => {
      const failures: string[] = [];
      const seqs = [...file.cases.flatMap((c) => [c.ids, c.ids_special]), ...file.decode_cases.map((c) => c.ids)];
      for (const ids of seqs) {
        for (const skip of [false, true]) {
          const got = stream(tok, ids, skip).join('');
          if (got !== tok.decode(ids, { skipSpecialTokens: skip })) failures.push(`${skip} ${JSON.stringify(ids.slice(0, 20))}`);
        }
      }
      expect(failures).toEqual([]);
    });

    it('never emits a replacement character or a broken surrogate for valid text', () => {
      for (const c of file.cases) {
        for (const delta of stream(tok, c.ids, false)) {
          if (!c.text.includes('\uFFFD')) expect(delta).not.toContain('\uFFFD');
          expect(hasLoneSurrogate(delta)).toBe(false);
        }
      }
    });

    it('matches decode() on random token sequences (incl. byte tokens and specials)', () => {
      const rand = createRng(1234); // seeded so failures reproduce
      const byteIds: number[] = [];
      for (let id = 0; id < tok.vocabSize; id++) {
        const t = tok.idToToken(id);
        if (t !== undefined && /^<0x[0-9A-F]{2}>$/.test(t)) byteIds.push(id);
      }
      const specials = tok.addedTokens.map((t) => t.id);
      const failures: string[] = [];
      for (let trial = 0; trial < 2000; trial++) {
        const len = 1 + Math.floor(rand() * 12);
        const ids: number[] = [];
        for (let i = 0; i < len; i++) {
          const r = rand();
          if (r < 0.15 && specials.length > 0) ids.push(specials[Math.floor(rand() * specials.length)]!);
          else if (r < 0.4 && byteIds.length > 0) ids.push(byteIds[Math.floor(rand() * byteIds.length)]!);
          else ids.push(Math.floor(rand() * tok.vocabSize));
        }
        for (const skip of [false, true]) {
          const got = stream(tok, ids, skip).join('');
          const want = tok.decode(ids, { skipSpecialTokens: skip });
          if (got !== want) failures.push(`${skip} ${JSON.stringify(ids)} got ${JSON.stringify(got)} want ${JSON.stringify(want)}`);
        }
      }
      expect(failures.slice(0, 5)).toEqual([]);
    });
  });
}

describe('streaming detokenizer: hand-made tokenizers', () => {
  const metaspace: TokenizerJson = {
    model: {
      type: 'BPE',
      vocab: { '\u2581': 0, '\u2581a': 1, b: 2, '<0xC3>': 3, '<0xA9>': 4, '\u2581\u2581': 5, '<s>': 6, a: 7 },
      merges: [['\u2581', 'a']],
      byte_fallback: true,
    },
    added_tokens: [{ id: 6, content: '<s>', special: true, normalized: false }],
    pre_tokenizer: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: true },
    decoder: {
      type: 'Sequence',
      decoders: [{ type: 'ByteFallback' }, { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: true }],
    },
  };

  it('strips the Metaspace prefix only on the first decoded token', () => {
    const tok = Tokenizer.fromJSON(metaspace);
    for (const ids of [[1, 1, 2], [0, 1], [5, 1], [6, 1, 1], [3, 4, 1], [6, 0, 1]]) {
      for (const skip of [false, true]) {
        expect(stream(tok, ids, skip).join('')).toBe(tok.decode(ids, { skipSpecialTokens: skip }));
      }
    }
    expect(stream(tok, [1, 1], false)).toEqual(['a', ' a', '']);
  });

  it('holds byte-fallback bytes until the character is complete', () => {
    const tok = Tokenizer.fromJSON(metaspace);
    expect(stream(tok, [1, 3, 4, 2], false)).toEqual(['a', '', '', '\u00e9b', '']);
    expect(stream(tok, [1, 3], false)).toEqual(['a', '', '\uFFFD']);
  });

  it('holds byte-level bytes until the character is complete', () => {
    const tok0 = Tokenizer.fromFile(join(FIXTURES, 'bytelevel', 'tokenizer.json'));
    const ids = tok0.encode('\u4f60\u597d\ud83d\ude00', { addSpecialTokens: false });
    const deltas = stream(tok0, ids, false);
    expect(deltas.join('')).toBe('\u4f60\u597d\ud83d\ude00');
    for (const d of deltas) expect(d).not.toContain('\uFFFD');
  });
});
