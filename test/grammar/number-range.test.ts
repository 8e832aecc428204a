// Bounded JSON numbers are exact: xgrammar 0.1.27's own float ranges are unsound (it admits 1.5 for
// maximum 1 and the bound itself when exclusive), so rapid builds these rules itself. Every
// candidate number (integers, decimals, the bounds and their neighbours) is accepted iff it lies in
// the range, first on the rule alone, then through the grammar service's matcher on real tokens.
import { describe, expect, it } from 'vitest';
import { grammarServiceFor } from '../../src/engine/grammar/grammar-service.js';
import { extractNumberRanges, numberRangeEbnf, type NumberBounds } from '../../src/engine/grammar/number-range.js';
import { xgrammar } from '../../src/engine/grammar/xgrammar.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';

interface XgTest {
  Grammar: { fromEBNF(ebnf: string, root?: string): Promise<{ dispose(): void }> };
  Testings: { isGrammarAcceptString(g: unknown, s: string): Promise<boolean> };
}

const RANGES: [string, NumberBounds][] = [
  ['[-1, 1]', { min: { value: -1, strict: false }, max: { value: 1, strict: false } }],
  ['(0, 1)', { min: { value: 0, strict: true }, max: { value: 1, strict: true } }],
  ['[0.5, 2.25]', { min: { value: 0.5, strict: false }, max: { value: 2.25, strict: false } }],
  ['>= 0', { min: { value: 0, strict: false } }],
  ['> -2.5', { min: { value: -2.5, strict: true } }],
  ['< 0.05', { max: { value: 0.05, strict: true } }],
  ['[-12.75, -0.125]', { min: { value: -12.75, strict: false }, max: { value: -0.125, strict: false } }],
  ['[10, 120)', { min: { value: 10, strict: false }, max: { value: 120, strict: true } }],
  ['(0.1, 0.105]', { min: { value: 0.1, strict: true }, max: { value: 0.105, strict: false } }],
];

function candidates(): string[] {
  const out = new Set<string>();
  for (let i = -130; i <= 130; i++) out.add(String(i));
  for (let i = -260; i <= 260; i++) out.add((i / 100).toFixed(2));
  for (let i = -1300; i <= 1300; i += 5) out.add((i / 10).toFixed(1));
  for (const x of ['0.05', '0.049', '0.0501', '0.1', '0.1001', '0.105', '0.1050', '0.1051', '0.10499', '2.25', '2.250', '2.2501', '-0.125', '-0.1249', '-0.1251', '-12.75', '-12.7501', '-2.5', '-2.4999', '-2.5001', '0.5', '0.4999', '119.999', '120.0', '0.000', '0.0001', '1.0', '1.00001', '-1.0', '-1.00001', '0.9999999'])
    out.add(x);
  return [...out];
}

function inRange(x: number, b: NumberBounds): boolean {
  if (b.min && (b.min.strict ? !(x > b.min.value) : !(x >= b.min.value))) return false;
  if (b.max && (b.max.strict ? !(x < b.max.value) : !(x <= b.max.value))) return false;
  return true;
}

describe('exact number ranges', () => {
  it.each(RANGES)('%s: a number is accepted iff it is in range', async (_name, bounds) => {
    const xg = xgrammar() as unknown as XgTest;
    const body = numberRangeEbnf(bounds)!;
    const g = await xg.Grammar.fromEBNF(`root ::= ${body}`, 'root');
    const wrong: string[] = [];
    for (const s of candidates()) {
      if (s === '-0' || s.startsWith('-0.0') && Number(s) === 0) continue; // "-0" spellings are not generated
      const want = inRange(Number(s), bounds);
      if ((await xg.Testings.isGrammarAcceptString(g, s)) !== want) wrong.push(`${s}:${want ? 'refused' : 'accepted'}`);
    }
    g.dispose();
    expect(wrong).toEqual([]);
  });

  it('schemas: bounded numbers become placeholders (also inside type arrays and nesting), the rest is untouched', () => {
    const { schema, rules } = extractNumberRanges({
      type: 'object',
      properties: { a: { type: 'number', minimum: 0 }, b: { type: ['number', 'null'], maximum: 1 }, c: { type: 'integer', minimum: 2 }, d: { const: { type: 'number', minimum: 1 } } },
    });
    expect(rules).toHaveLength(2);
    expect(schema).toEqual({
      type: 'object',
      properties: {
        a: { const: '__rapid_number_0' },
        b: { anyOf: [{ const: '__rapid_number_1' }, { maximum: 1, type: ['null'] }] },
        c: { type: 'integer', minimum: 2 },
        d: { const: { type: 'number', minimum: 1 } },
      },
    });
  });

  it('through the grammar service: what xgrammar got wrong is now right', async () => {
    const text = loadTokenizerDir(`${FIXTURE_ROOT}/qwen2-q4`);
    const svc = grammarServiceFor(text, 1024);
    const byteIds = (s: string) => [...Buffer.from(s)].map((b) => text.tokenizer.encode(String.fromCharCode(b), { addSpecialTokens: false })[0]!);
    const check = async (schema: unknown, value: string): Promise<boolean> => {
      const g = await svc.matcher({ type: 'json_schema', name: 's', schema, strict: true });
      try {
        for (const id of byteIds(value)) if (!g.accept(id)) return false;
        const n = await g.next();
        return n.kind === 'complete' || (n.kind === 'mask' && [...text.stopTokenIds].some((t) => (n.bitmask[t >> 5]! >>> (t & 31)) & 1));
      } finally {
        g.dispose();
      }
    };
    const s = { type: 'object', properties: { x: { type: 'number', minimum: -1, maximum: 1 } }, required: ['x'], additionalProperties: false };
    expect(await check(s, '{"x":-1.855555}')).toBe(false);
    expect(await check(s, '{"x":1.5}')).toBe(false);
    expect(await check(s, '{"x":-0.5}')).toBe(true);
    expect(await check(s, '{"x":0.25}')).toBe(true);
    const open = { type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 1 };
    expect(await check(open, '0')).toBe(false);
    expect(await check(open, '1')).toBe(false);
    expect(await check(open, '0.5')).toBe(true);
    await expect(svc.matcher({ type: 'json_schema', name: 's', schema: { type: 'number', minimum: 2, maximum: 1 }, strict: true })).rejects.toThrow(/admits no value/);
  });
});
