// Schema limits before any compile: each refusal an InvalidRequestError naming the limit and the
// path; walks safe at depth 10,000 (no RangeError); refs that can never end refused, recursive
// schemas with a way out accepted.
import { describe, expect, it } from 'vitest';
import { InvalidRequestError } from '../../src/errors/request-errors.js';
import { parseResponseFormat } from '../../src/server/response-format.js';
import { checkSchemaLimits, SCHEMA_LIMITS } from '../../src/engine/grammar/schema-limits.js';
import { parseToolRequest } from '../../src/server/tools.js';

const nestObjects = (d: number, leaf: unknown = { type: 'string' }) => {
  let s = leaf;
  for (let i = 0; i < d; i++) s = { type: 'object', properties: { a: s }, required: ['a'] };
  return s;
};
const nestValue = (d: number) => {
  let v: unknown = 1;
  for (let i = 0; i < d; i++) v = { a: v };
  return v;
};
const nestArrays = (d: number) => {
  let v: unknown = [];
  for (let i = 0; i < d; i++) v = [v];
  return v;
};

function refusal(schema: unknown): InvalidRequestError {
  try {
    parseResponseFormat({ type: 'json_schema', json_schema: { name: 's', schema, strict: true } });
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidRequestError);
    return err as InvalidRequestError;
  }
  throw new Error('the schema was accepted');
}

describe('schema limits', () => {
  it('the 60-deep schema that trapped xgrammar is refused, naming maxSchemaDepth and the path', () => {
    const e = refusal(nestObjects(60));
    expect(e.message).toMatch(/maxSchemaDepth = 32/);
    expect(e.message).toMatch(/^response_format\.json_schema\.schema\.properties\.a\.properties\.a/);
    expect(() => checkSchemaLimits(nestObjects(SCHEMA_LIMITS.maxSchemaDepth))).not.toThrow();
  });

  it('nesting 10,000 deep in a schema, const, enum, anyOf, items and tool parameters is a clean refusal', () => {
    const cases: unknown[] = [
      nestObjects(10_000),
      { const: nestValue(10_000) },
      { enum: [nestValue(10_000)] },
      { enum: [nestArrays(10_000)] },
      (() => {
        let s: unknown = { type: 'null' };
        for (let i = 0; i < 10_000; i++) s = { anyOf: [s] };
        return s;
      })(),
      (() => {
        let s: unknown = { type: 'null' };
        for (let i = 0; i < 10_000; i++) s = { type: 'array', items: s };
        return s;
      })(),
    ];
    for (const schema of cases) expect(refusal(schema).message).toMatch(/maxJsonDepth|maxSchemaDepth/);
    const tools = [{ type: 'function', function: { name: 'f', parameters: nestObjects(10_000) } }];
    for (const choice of ['auto', 'required', { type: 'function', function: { name: 'f' } }]) {
      expect(() => parseToolRequest(tools, choice)).toThrow(/tools\[0\]\.function\.parameters.*(maxJsonDepth|maxSchemaDepth)/);
    }
  });

  it('a chain of 60 $refs nests like 60 inline levels (xgrammar trapped on it)', () => {
    const defs: Record<string, unknown> = { d0: { type: 'string' } };
    for (let i = 1; i <= 60; i++) defs[`d${i}`] = { type: 'object', properties: { a: { $ref: `#/$defs/d${i - 1}` } }, required: ['a'] };
    expect(refusal({ $defs: defs, $ref: '#/$defs/d60' }).message).toMatch(/maxSchemaDepth/);
  });

  it('sizes: properties, enum values, value bytes, subschemas, bytes', () => {
    const props = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, { type: 'integer' }]));
    expect(refusal({ type: 'object', properties: props(10_000) }).message).toMatch(/maxBytes|maxNodes|maxProperties/);
    expect(refusal({ type: 'object', properties: props(1_500) }).message).toMatch(/schema\.properties: 1500 properties exceeds the limit maxProperties = 1000/);
    expect(() => checkSchemaLimits({ type: 'object', properties: props(SCHEMA_LIMITS.maxProperties) })).not.toThrow();
    expect(refusal({ enum: Array.from({ length: 100_000 }, (_, i) => i) }).message).toMatch(/maxEnumValues = 1000/);
    expect(refusal({ const: 'x'.repeat(70_000) }).message).toMatch(/maxValueBytes/);
    expect(refusal({ type: 'string', description: 'x'.repeat(300_000) }).message).toMatch(/maxBytes/);
    const wide = { anyOf: Array.from({ length: 6000 }, () => ({ type: 'null' })) };
    expect(refusal(wide).message).toMatch(/maxNodes = 5000/);
  });

  it('refs that can never end are refused; recursion with a way out is accepted', () => {
    expect(refusal({ $ref: '#' }).message).toMatch(/\$ref recurses with no way to end/);
    expect(refusal({ $defs: { a: { $ref: '#/$defs/b' }, b: { $ref: '#/$defs/a' } }, $ref: '#/$defs/a' }).message).toMatch(/no way to end/);
    const required = { $defs: { a: { type: 'object', properties: { x: { $ref: '#/$defs/a' } }, required: ['x'] } }, $ref: '#/$defs/a' };
    expect(refusal(required).message).toMatch(/no way to end/);
    const nonEmpty = { $defs: { a: { type: 'array', items: { $ref: '#/$defs/a' }, minItems: 1 } }, $ref: '#/$defs/a' };
    expect(refusal(nonEmpty).message).toMatch(/no way to end/);
    expect(refusal({ $ref: '#/$defs/missing' }).message).toMatch(/does not point to a schema/);
    expect(refusal({ type: 'object', properties: { x: { $ref: '#/properties/x/const' , const: 1 } } }).message).toMatch(/\$ref/);
    // A tree with optional children, a linked list through anyOf null, an optional self-reference.
    const ok: unknown[] = [
      { $defs: { node: { type: 'object', properties: { v: { type: 'integer' }, children: { type: 'array', items: { $ref: '#/$defs/node' } } }, required: ['v', 'children'] } }, $ref: '#/$defs/node' },
      { $defs: { list: { type: 'object', properties: { next: { anyOf: [{ $ref: '#/$defs/list' }, { type: 'null' }] } }, required: ['next'] } }, $ref: '#/$defs/list' },
      { type: 'object', properties: { self: { $ref: '#' } } },
    ];
    for (const schema of ok) expect(() => checkSchemaLimits(schema)).not.toThrow();
  });

  it('long paths are cut in messages', () => {
    const e = refusal(nestObjects(10_000));
    expect(e.message.length).toBeLessThan(400);
  });
});
