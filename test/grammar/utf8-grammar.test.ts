// Constrained text is valid text (issue 38): random walks through the real xgrammar mask over the
// fixture vocabularies (sentencepiece byte fallback, byte-level BPE), biased hard towards byte
// tokens the way a sampler's logits could be, never produce ill-formed UTF-8: no U+FFFD in any
// output, and maxLength / minLength hold by code points.
import { describe, expect, it } from 'vitest';
import { grammarServiceFor } from '../../src/engine/grammar/grammar-service.js';
import { parseResponseFormat } from '../../src/server/response-format.js';
import type { RequestGrammar } from '../../src/engine/grammar/request-grammar.js';
import { CHAR_TO_BYTE } from '../../src/tokenizer/byte-level-alphabet.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { schemaViolation } from './json-schema-check.mjs';

const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 3 },
    note: { type: 'string', minLength: 2, maxLength: 4 },
    tags: { type: 'array', items: { type: 'string', maxLength: 2 }, maxItems: 2 },
  },
  required: ['name', 'note', 'tags'],
  additionalProperties: false,
};
const VOCAB = 1024; // the fixtures' config vocab_size

function allowed(mask: Int32Array): number[] {
  const out: number[] = [];
  for (let i = 0; i < VOCAB; i++) if ((mask[i >> 5]! >>> (i & 31)) & 1) out.push(i);
  return out;
}

describe.each(['llama-q4', 'gemma3-q8', 'qwen2-q4'])('UTF-8 guard over the %s vocabulary', (name) => {
  const text = loadTokenizerDir(`${FIXTURE_ROOT}/${name}`);
  const tok = text.tokenizer;
  const service = grammarServiceFor(text, VOCAB);
  const format = parseResponseFormat({ type: 'json_schema', json_schema: { name: 's', schema: SCHEMA, strict: true } })!;
  // Tokens that are a single byte >= 0x80 alone: what spells ill-formed text when joined wrongly.
  const highBytes = new Set<number>();
  for (let i = 0; i < tok.vocabSize; i++) if (!tok.isSpecialId(i) && tok.decode([i]) === '\uFFFD') highBytes.add(i);

  it('has lone high-byte tokens to test with', () => {
    expect(highBytes.size).toBeGreaterThan(100);
  });

  async function walk(g: RequestGrammar, rnd: (n: number) => number): Promise<number[]> {
    const ids: number[] = [];
    for (let step = 0; step < 300; step++) {
      const next = await g.next();
      if (next.kind === 'complete') break;
      if (next.kind !== 'mask') throw new Error(`the grammar is ${next.kind} after ${tok.decode(ids)}`);
      const ok = allowed(next.bitmask);
      const bytes = ok.filter((t) => highBytes.has(t));
      // Mostly byte tokens, then anything: a sampler whose logits favour them.
      const pick = bytes.length > 0 && rnd(10) < 8 ? bytes[rnd(bytes.length)]! : ok[rnd(ok.length)]!;
      expect(g.accept(pick)).toBe(true);
      ids.push(pick);
    }
    return ids;
  }

  it('never emits ill-formed UTF-8; string lengths hold by code points', async () => {
    let seed = 777;
    const rnd = (n: number) => {
      seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
      return seed % n;
    };
    let multiByte = 0;
    for (let w = 0; w < 60; w++) {
      const g = await service.matcher(format);
      const ids = await walk(g, rnd);
      g.dispose();
      const out = tok.decode(ids, { skipSpecialTokens: true });
      expect(out, `walk ${w}`).not.toContain('\uFFFD');
      const value = JSON.parse(out) as unknown;
      expect(schemaViolation(SCHEMA, value), out).toBeNull();
      if (/[^\x00-\x7f]/.test(out)) multiByte++;
    }
    expect(multiByte).toBeGreaterThan(30); // the walks did spell characters from byte tokens
  }, 120_000);

  it('told the tokens left (budget closing off), a cut output still ends on a whole character', async () => {
    let seed = 99;
    const rnd = (n: number) => {
      seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
      return seed % n;
    };
    for (let w = 0; w < 60; w++) {
      const g = await service.matcher(format, { budgetClose: false });
      const budget = 8 + (w % 13);
      const ids: number[] = [];
      for (let i = 0; i < budget; i++) {
        g.setTokensLeft?.(budget - i);
        const next = await g.next();
        if (next.kind !== 'mask') break;
        const ok = allowed(next.bitmask);
        const bytes = ok.filter((t) => highBytes.has(t));
        const pick = bytes.length > 0 && rnd(10) < 8 ? bytes[rnd(bytes.length)]! : ok[rnd(ok.length)]!;
        expect(g.accept(pick)).toBe(true);
        ids.push(pick);
      }
      g.dispose();
      expect(tok.decode(ids, { skipSpecialTokens: true }), `walk ${w}`).not.toContain('\uFFFD');
    }
  });

  it('refuses a stop or a quote mid-character, and byte sequences no code point has', async () => {
    const byteTok = (b: number) => {
      for (const t of highBytes) if (byteOf(tok.idToToken(t)!) === b) return t;
      throw new Error(`no token for byte ${b}`);
    };
    const quote = tok.tokenToId('"')!;
    const open = ['{', '"', 'n', 'a', 'm', 'e', '"', ':', '"'].map((c) => tok.tokenToId(c)!);
    const cases: [string, number[]][] = [
      ['overlong C0 80', [0xc0, 0x80]],
      ['surrogate ED A0 80', [0xed, 0xa0, 0x80]],
      ['past U+10FFFF F4 90 80 80', [0xf4, 0x90, 0x80, 0x80]],
      ['F5 lead', [0xf5]],
      ['lone continuation', [0x80]],
    ];
    for (const [what, bytes] of cases) {
      const g = await service.matcher(format);
      for (const t of open) expect(g.accept(t)).toBe(true);
      // Accepted without a mask, a token is checked in the grammar worker: a refusal kills the output.
      const ok = bytes.map(byteTok).every((t) => g.accept(t)) && (await g.next()).kind !== 'dead';
      expect(ok, what).toBe(false);
      g.dispose();
    }
    const g = await service.matcher(format);
    for (const t of open) g.accept(t);
    expect(g.accept(byteTok(0xe4))).toBe(true);
    const next = await g.next();
    if (next.kind !== 'mask') throw new Error('expected a mask');
    expect((next.bitmask[quote >> 5]! >>> (quote & 31)) & 1).toBe(0);
    for (const t of allowed(next.bitmask)) expect(tok.decode([t]).startsWith('\uFFFD')).toBe(true); // continuation bytes first
    g.dispose();
  });
});

/** The byte a one-byte token stands for (<0xNN> byte fallback or one byte-level character), or -1. */
function byteOf(s: string): number {
  const m = /^<0x([0-9A-F]{2})>$/.exec(s);
  if (m) return parseInt(m[1]!, 16);
  return [...s].length === 1 ? (CHAR_TO_BYTE.get(s) ?? -1) : -1;
}
