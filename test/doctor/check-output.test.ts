// The TypeScript port of golden.py's checker gives golden.py's verdicts: on hand-picked garbage (the
// expected reasons are what golden.garbage printed for the same strings) and on every golden item's
// reference output (golden.py's ok/why stored with test/fixtures/tiny-vlm/golden_reference_f32.json).
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkOutput, garbage, namedAbsent, normalize } from '../../src/doctor/coherence/check-output.js';
import { loadGoldenSet, type GoldenItem } from '../../src/doctor/coherence/golden-set.js';
import { runPasses, scoreOutputs } from '../../src/doctor/coherence/run-gate.js';

const root = resolve(import.meta.dirname, '..', '..');
const words = new Set(['red', 'blue', 'circle', 'the', 'is', 'at', 'top', 'a', 'tokyo', 'i', 'don', 't', 'know', 'count', 'shapes']);

describe('garbage detector (golden.py garbage)', () => {
  const cases: [string, string | null][] = [
    ['', 'empty'],
    ['   ', 'empty'],
    ['x'.repeat(1201), 'runaway length'],
    ['red red red red red red', "token repeated: 'red'"],
    ['red red red red red', "looping tail: ' red'"],
    ['the circle is at the top, at the top, at the top, at the top,', "looping tail: ' at the top,'"],
    ['a blue zorb', 'non-words: zorb'],
    ['Tokyo.', null],
    ['abababababab', "looping tail: 'abab'"],
    ['1 2 3', null],
    ["I don't know", null],
    ['a.a.a.a.a.a', null],
    ['héllo', 'non-words: h llo'],
    ['circle circle, circle circle circle', "looping tail: ' circle'"],
  ];
  for (const [text, why] of cases) {
    it(`${JSON.stringify(text.length > 40 ? `${text.slice(0, 20)}...` : text)} -> ${why ?? 'clean'}`, () => {
      expect(garbage(text, words)).toBe(why);
    });
  }
});

describe('answer match', () => {
  const exact: GoldenItem = { id: 't', category: 'fact', prompt: '', image: null, match: 'exact', expected: 'Tokyo' };
  const json: GoldenItem = { id: 'j', category: 'json', prompt: '', image: null, match: 'json', expected: { count: 1, shapes: [1, 2] } };

  it('normalises case, spaces and a trailing "." or "!"', () => {
    expect(normalize('  TOKYO!! ')).toBe('tokyo');
    expect(checkOutput(exact, ' tokyo. ', words)).toEqual({ ok: true, why: 'ok' });
    expect(checkOutput(exact, 'red', words)).toEqual({ ok: false, why: 'wrong answer' });
  });

  it('compares JSON as objects (key order ignored, array order kept)', () => {
    expect(checkOutput(json, '{"shapes":[1,2],"count":1}', words)).toEqual({ ok: true, why: 'ok' });
    expect(checkOutput(json, '{"shapes":[2,1],"count":1}', words)).toEqual({ ok: false, why: 'wrong JSON' });
    expect(checkOutput(json, '{"count":1', words).why).toMatch(/^invalid JSON: /);
  });
});

const refFile = join(root, 'test', 'fixtures', 'tiny-vlm', 'golden_reference_f32.json');
const goldenDir = join(root, 'models', 'tiny-vlm', 'golden');

describe.skipIf(!existsSync(refFile) || !existsSync(goldenDir))('golden items', () => {
  it("every reference output gets golden.py's verdict and reason", () => {
    const set = loadGoldenSet(goldenDir);
    const ref = JSON.parse(readFileSync(refFile, 'utf8')) as { outputs: Record<string, string>; checks: Record<string, [boolean, string]> };
    const ours = set.items.map((it) => {
      const c = checkOutput(it, ref.outputs[it.id]!, set.words);
      return [it.id, c.ok, c.why.startsWith('invalid JSON') ? 'invalid JSON' : c.why];
    });
    const theirs = set.items.map((it) => {
      const [ok, why] = ref.checks[it.id]!;
      return [it.id, ok, why.startsWith('invalid JSON') ? 'invalid JSON' : why];
    });
    expect(ours).toEqual(theirs);
  });
});

describe('hallucinated shapes (items with "absent")', () => {
  const words = new Set(['a', 'blue', 'square', 'squares', 'circle', 'circles', 'shape', 'shapes', 'on', 'white', 'background', 'there', 'is', 'no']);
  const item: GoldenItem = { id: 'h', category: 'describe', prompt: 'Describe it.', image: 'x.png', match: 'exact', expected: 'a blue square', absent: ['circle'] };

  it('fails an answer naming a kind the picture lacks, singular or plural, whatever the case', () => {
    expect(checkOutput(item, 'a blue square', words)).toEqual({ ok: true, why: 'ok' });
    expect(checkOutput(item, 'a blue Circle', words)).toEqual({ ok: false, why: 'names a shape not in the picture: circle' });
    expect(namedAbsent('two circles on white', ['circle', 'diamond'])).toEqual(['circle']);
    expect(namedAbsent('circled', ['circle'])).toEqual([]);
  });

  it('the gate counts them, and --per-category fails a set with one', () => {
    const set = { dir: '/nowhere', items: [item, { ...item, id: 'h2', category: 'colour', expected: 'blue', absent: ['circle'] }], words, schemas: new Map() };
    const run = scoreOutputs(set, { h: 'a blue square', h2: 'There is no circle.' });
    expect(run.hallucinations).toBe(1);
    expect(run.perCategory).toEqual({ describe: { passed: 1, total: 1 }, colour: { passed: 0, total: 1 } });
    expect(runPasses(run, 0.5, false)).toBe(true);
    expect(runPasses(run, 0.5, true)).toBe(false);
    const clean = scoreOutputs(set, { h: 'a blue square', h2: 'blue' });
    expect(runPasses(clean, 0.95, true)).toBe(true);
  });
});
