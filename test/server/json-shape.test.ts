// The pre-parse scan of request bodies: depth and object counts outside strings, escapes honoured.
import { describe, expect, it } from 'vitest';
import { jsonShapeProblem } from '../../src/server/json-shape.js';

const scan = (text: string, depth = 4, objects = 100) => jsonShapeProblem(Buffer.from(text), depth, objects);

describe('jsonShapeProblem', () => {
  it('passes bodies within both limits', () => {
    expect(scan('{"a": [1, [2, [3]]]}')).toBeNull();
    expect(scan('[]')).toBeNull();
  });

  it('finds the first byte past the depth limit, without recursion', () => {
    expect(scan('{"a": [[[[1]]]]}')).toEqual({ kind: 'depth', at: 9 });
    const deep = `${'['.repeat(1_000_000)}${']'.repeat(1_000_000)}`;
    expect(jsonShapeProblem(Buffer.from(deep), 128, 1)).toEqual({ kind: 'depth', at: 128 });
  });

  it('ignores brackets inside strings, escaped quotes included', () => {
    expect(scan('{"a": "[[[[[[{{{{"}')).toBeNull();
    expect(scan('{"a": "x\\"[[[[[[", "b": "\\\\"}')).toBeNull();
    expect(scan('{"a": "\\\\\\"[[[[[["}')).toBeNull();
  });

  it('counts objects', () => {
    expect(scan(JSON.stringify(Array.from({ length: 100 }, () => ({})))) ).toBeNull();
    expect(scan(JSON.stringify(Array.from({ length: 101 }, () => ({}))))?.kind).toBe('objects');
  });

  it('scans a 64 MB string body quickly (string bodies are skipped natively)', () => {
    const body = Buffer.from(JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(64 << 20) }] }));
    const t0 = performance.now();
    expect(jsonShapeProblem(body, 128, 32_768)).toBeNull();
    console.log(`scan of ${body.length} bytes: ${(performance.now() - t0).toFixed(1)} ms`);
  });
});
