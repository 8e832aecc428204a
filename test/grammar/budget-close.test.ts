// Budget-aware closing (issue 38) against the real xgrammar matcher over the fixture vocabularies:
// a random walk told how many tokens it has left ends, within that budget, in JSON that parses and
// validates (ajv) for every schema of the sweeps and every budget from the schema's shortest output
// up to 40 tokens (16 past it for longer ones); without the budget it runs as before; the opt-out leaves the cut output cut.
import { Ajv } from 'ajv';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { grammarServiceFor } from '../../src/engine/grammar/grammar-service.js';
import { parseResponseFormat, type ResponseFormat } from '../../src/server/response-format.js';
import type { RequestGrammar } from '../../src/engine/grammar/request-grammar.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { SWEEP_SCHEMAS } from './sweep-schemas.js';

const VOCAB = 1024;
const MIXED = JSON.parse(readFileSync(new URL('./mixed-schemas.json', import.meta.url), 'utf8')) as Record<string, unknown>[];
const STRINGS = {
  type: 'object',
  properties: {
    title: { type: 'string', minLength: 3, maxLength: 8 },
    code: { type: 'string', pattern: '^[A-Z]{2}[0-9]{3}$' },
    items: { type: 'array', items: { type: 'object', properties: { n: { type: 'integer', minimum: 10 } }, required: ['n'] }, minItems: 2 },
    ratio: { type: 'number', exclusiveMinimum: 0, maximum: 0.5 },
  },
  required: ['title', 'code', 'items', 'ratio'],
  additionalProperties: false,
};
// A branch whose choices differ greatly in length: one token can lengthen the closing a lot.
const LOPSIDED = {
  type: 'object',
  properties: { k: { enum: ['a', 'the quick brown fox jumps over the lazy dog'] }, n: { anyOf: [{ type: 'null' }, { type: 'array', items: { const: 'abcdefgh' }, minItems: 3 }] } },
  required: ['k', 'n'],
  additionalProperties: false,
};
const SCHEMAS: unknown[] = [...SWEEP_SCHEMAS, ...MIXED, STRINGS, LOPSIDED];
const FORMATS: ResponseFormat[] = [
  ...SCHEMAS.map((schema) => parseResponseFormat({ type: 'json_schema', json_schema: { name: 's', schema, strict: true } })!),
  { type: 'json_object' },
];

function allowed(mask: Int32Array): number[] {
  const out: number[] = [];
  for (let i = 0; i < VOCAB; i++) if ((mask[i >> 5]! >>> (i & 31)) & 1) out.push(i);
  return out;
}

describe.each(['llama-q4', 'qwen2-q4'])('budget-aware closing over the %s vocabulary', (name) => {
  const text = loadTokenizerDir(`${FIXTURE_ROOT}/${name}`);
  const tok = text.tokenizer;
  const service = grammarServiceFor(text, VOCAB);
  const ajv = new Ajv({ strict: false });

  /** A random walk of at most `budget` tokens that tells the grammar what is left (unless told not to). */
  async function walk(g: RequestGrammar, budget: number, seed: number, tell = true): Promise<{ out: string; complete: boolean }> {
    let s = seed >>> 0;
    const rnd = (n: number) => {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      return s % n;
    };
    const ids: number[] = [];
    let complete = false;
    for (let i = 0; i < budget; i++) {
      if (tell) g.setTokensLeft?.(budget - i);
      const next = await g.next();
      if (next.kind === 'complete') {
        complete = true;
        break;
      }
      if (next.kind !== 'mask') throw new Error(`the grammar is ${next.kind} after ${tok.decode(ids)}`);
      const ok = allowed(next.bitmask);
      const pick = ok[rnd(ok.length)]!;
      expect(g.accept(pick)).toBe(true);
      ids.push(pick);
    }
    if (!complete) complete = (await g.next()).kind === 'complete';
    return { out: tok.decode(ids, { skipSpecialTokens: true }), complete };
  }

  it('every budget from the shortest output up to 40 (or 16 more) ends in valid JSON', async () => {
    let cutByBudget = 0;
    for (const [k, format] of FORMATS.entries()) {
      const validate = ajv.compile(format.type === 'json_schema' ? (format.schema as object) : { type: 'object' });
      const least = await leastBudget(format);
      expect(least, `schema ${k}`).toBeLessThanOrEqual(80);
      for (let run = 0; run < 3 * (Math.max(40, least + 16) - least + 1); run++) {
        const budget = least + Math.floor(run / 3);
        const g = await service.matcher(format);
        const { out, complete } = await walk(g, budget, run * 7919 + k);
        const closed = g.closedByBudget?.() === true;
        g.dispose();
        expect(complete, `schema ${k} budget ${budget}: ${out}`).toBe(true);
        expect(validate(JSON.parse(out)), `schema ${k} budget ${budget}: ${out} ${JSON.stringify(validate.errors)}`).toBe(true);
        expect(out).not.toContain('\uFFFD');
        if (closed) cutByBudget++;
      }
    }
    expect(cutByBudget).toBeGreaterThan(150); // the random walks mostly needed closing
  }, 300_000);

  /** The token count of the shortest output: what a walk with one token left at every step emits. */
  async function leastBudget(format: ResponseFormat): Promise<number> {
    const g = await service.matcher(format);
    let n = 0;
    for (;;) {
      g.setTokensLeft?.(1);
      const next = await g.next();
      if (next.kind !== 'mask') break;
      const ok = allowed(next.bitmask);
      expect(ok.length, 'a forced closing allows one token').toBe(1);
      expect(g.accept(ok[0]!)).toBe(true);
      n++;
    }
    expect(g.closedByBudget?.()).toBe(true);
    g.dispose();
    return n;
  }

  it('opting out leaves a cut output cut; a walk with room to spare is not closed early', async () => {
    const format = FORMATS[FORMATS.length - 3]!; // STRINGS
    const cut = await service.matcher(format, { budgetClose: false });
    const a = await walk(cut, 12, 5);
    expect(a.complete).toBe(false);
    expect(cut.closedByBudget?.() ?? false).toBe(false);
    cut.dispose();
    const free = await service.matcher(format);
    await walk(free, 60, 5, false); // never told a budget: the grammar runs as before
    expect(free.closedByBudget?.()).toBe(false);
    free.dispose();
  });
});
