// The pre-parse scan of request bodies: depth and object counts outside strings, escapes honoured.
import { describe, expect, it } from 'vitest';
import { jsonShapeProblem } from '../../src/server/json-shape.js';

const scan = (text: string, maxDepth = 4, maxObjects = 100, maxValues = 1_000) => jsonShapeProblem(Buffer.from(text), { maxDepth, maxObjects, maxValues });

describe('jsonShapeProblem', () => {
  it('passes bodies within both limits', () => {
    expect(scan('{"a": [1, [2, [3]]]}')).toBeNull();
    expect(scan('[]')).toBeNull();
  });

  it('finds the first byte past the depth limit, without recursion', () => {
    expect(scan('{"a": [[[[1]]]]}')).toEqual({ kind: 'depth', at: 9 });
    const deep = `${'['.repeat(1_000_000)}${']'.repeat(1_000_000)}`;
    expect(jsonShapeProblem(Buffer.from(deep), { maxDepth: 128, maxObjects: 1, maxValues: 1e9 })).toEqual({ kind: 'depth', at: 128 });
  });

  it('ignores brackets inside strings, escaped quotes included', () => {
    expect(scan('{"a": "[[[[[[{{{{"}')).toBeNull();
    expect(scan('{"a": "x\\"[[[[[[", "b": "\\\\"}')).toBeNull();
    expect(scan('{"a": "\\\\\\"[[[[[["}')).toBeNull();
  });

  it('counts values: array elements and members, separators outside strings only', () => {
    expect(scan(JSON.stringify({ a: Array.from({ length: 998 }, () => 1) }))).toBeNull();
    expect(scan(JSON.stringify({ a: Array.from({ length: 1_000 }, () => 1) }))?.kind).toBe('values');
    expect(scan(JSON.stringify({ a: ','.repeat(5_000) }))).toBeNull();
    // 8 MB of [1,1,...] parses in ~450 ms; the scan stops at the limit.
    const big = Buffer.from(`{"prompt":[${'1,'.repeat(4 << 20)}1]}`);
    const problem = jsonShapeProblem(big, { maxDepth: 128, maxObjects: 32_768, maxValues: 262_144 });
    expect(problem?.kind).toBe('values');
    expect(problem!.at).toBeLessThan(2 * 262_144 + 16);
  });

  it('counts objects', () => {
    expect(scan(JSON.stringify(Array.from({ length: 100 }, () => ({})))) ).toBeNull();
    expect(scan(JSON.stringify(Array.from({ length: 101 }, () => ({}))))?.kind).toBe('objects');
  });

  it('scans a 64 MB string body quickly (string bodies are skipped natively)', () => {
    const body = Buffer.from(JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(64 << 20) }] }));
    const t0 = performance.now();
    expect(jsonShapeProblem(body, { maxDepth: 128, maxObjects: 32_768, maxValues: 262_144 })).toBeNull();
    console.log(`scan of ${body.length} bytes: ${(performance.now() - t0).toFixed(1)} ms`);
  });
});
