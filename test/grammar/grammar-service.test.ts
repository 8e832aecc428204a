// Grammar soundness independent of any model: random walks that pick any allowed token from the
// xgrammar mask, over the real fixture tokenizers (byte-level BPE and byte-fallback sentencepiece),
// always decode to JSON that validates; compiled grammars are cached by schema hash.
import { describe, expect, it } from 'vitest';
import { grammarServiceFor } from '../../src/engine/grammar/grammar-service.js';
import { parseResponseFormat } from '../../src/server/response-format.js';
import { InvalidRequestError } from '../../src/errors/request-errors.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { schemaViolation } from './json-schema-check.mjs';

const SCHEMA = {
  type: 'object',
  properties: {
    kind: { enum: ['cat', 'dog'] },
    age: { type: 'integer', minimum: 0, maximum: 30 },
    weight: { type: 'number' },
    tags: { type: 'array', items: { type: 'string', maxLength: 4 }, minItems: 1, maxItems: 2 },
    owner: { type: 'object', properties: { name: { type: 'string', maxLength: 5 } }, required: ['name'], additionalProperties: false },
    nick: { anyOf: [{ type: 'string', maxLength: 3 }, { type: 'null' }] },
  },
  required: ['kind', 'age', 'tags', 'owner', 'nick'],
  additionalProperties: false,
};

function allowed(mask: Int32Array, vocab: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < vocab; i++) if ((mask[i >> 5]! >>> (i & 31)) & 1) out.push(i);
  return out;
}

describe.each(['qwen2-q4', 'gemma3-q8'])('grammar service over the %s tokenizer', (name) => {
  const text = loadTokenizerDir(`${FIXTURE_ROOT}/${name}`);
  const vocab = 1024; // the fixtures' config vocab_size (wider than the tokenizer's 1000 + added)
  const service = grammarServiceFor(text, vocab);

  it('random walks through the mask always end in valid JSON', async () => {
    const format = parseResponseFormat({ type: 'json_schema', json_schema: { name: 's', schema: SCHEMA, strict: true } })!;
    let seed = 12345;
    const rnd = (n: number) => {
      seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
      return seed % n;
    };
    for (let walk = 0; walk < 40; walk++) {
      const g = await service.matcher(format);
      const ids: number[] = [];
      for (let step = 0; step < 400; step++) {
        const next = await g.next();
        if (next.kind === 'complete') break;
        expect(next.kind).toBe('mask');
        if (next.kind !== 'mask') break;
        expect(next.bitmask.length).toBe(Math.ceil(vocab / 32));
        const ok = allowed(next.bitmask, vocab);
        // Any allowed token, byte tokens included: the UTF-8 guard keeps them to well-formed text.
        const pick = ok[rnd(ok.length)]!;
        for (const id of ok) expect(text.tokenizer.isSpecialId(id) || id < text.tokenizer.vocabSize).toBe(true);
        expect(g.accept(pick)).toBe(true);
        ids.push(pick);
      }
      const out = text.tokenizer.decode(ids, { skipSpecialTokens: true });
      expect(out).not.toContain('\uFFFD');
      const value = JSON.parse(out) as unknown;
      expect(schemaViolation(SCHEMA, value), out).toBeNull();
      g.dispose();
    }
  });

  it('json_object allows only objects and caches the compiled grammar', async () => {
    const a = service.compile({ type: 'json_object' });
    const b = service.compile({ type: 'json_object' });
    expect(await a).toBe(await b); // the same compiled grammar (by key), compiled once in the worker
    const g = await service.matcher({ type: 'json_object' });
    const first = await g.next();
    if (first.kind !== 'mask') throw new Error('expected a mask');
    for (const id of allowed(first.bitmask, vocab)) expect(text.tokenizer.decode([id]).startsWith('{')).toBe(true);
    g.dispose();
  });

  it('a schema xgrammar refuses is an InvalidRequestError with its reason, and the service keeps working', async () => {
    const bad = { type: 'json_schema' as const, name: 's', schema: { type: 'string', pattern: '(a' }, strict: false };
    await expect(service.matcher(bad)).rejects.toBeInstanceOf(InvalidRequestError);
    await expect(service.matcher(bad)).rejects.toThrow(/pattern|Regex|paren/i);
    // Not from our cache: a fresh service (sharing the wasm module) compiles it again and refuses.
    await expect(grammarServiceFor(text, vocab).matcher(bad)).rejects.toThrow(/paren/i);
    const g = await service.matcher({ type: 'json_object' });
    expect((await g.next()).kind).toBe('mask');
    g.dispose();
  });
});
