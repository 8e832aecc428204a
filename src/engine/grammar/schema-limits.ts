// Limits on a JSON Schema checked before anything compiles or recurses over it. xgrammar's wasm
// traps on deep nesting (objects ~54 levels, anyOf ~100, const values ~1000) and compiles in time
// superlinear in the property count (10,000 properties: 38 s), so these are checked first, by
// iterative walks that are safe at any depth. Every refusal names the limit and the path.
import { InvalidRequestError } from '../../errors/request-errors.js';
import { isObject } from '../is-object.js';

/** The one source of truth for schema limits (a refusal's message quotes the name and value). */
export const SCHEMA_LIMITS = {
  /** Nesting of objects/arrays anywhere in the schema document, const and enum values included. */
  maxJsonDepth: 128,
  /** Nesting of subschemas (properties, items, anyOf, ...); xgrammar traps from about 54. */
  maxSchemaDepth: 32,
  /** The schema serialized as JSON. */
  maxBytes: 256 * 1024,
  /** Subschemas in the whole schema ($defs included). */
  maxNodes: 5_000,
  /** Properties over all objects of the schema: optional ones cost most (1,000 compile in 0.6-1.2 s, 2,000 in 1.7-2.2 s, 10,000 in 38 s). */
  maxProperties: 1_000,
  /** enum values over the whole schema. */
  maxEnumValues: 1_000,
  /** const and enum values together, serialized. */
  maxValueBytes: 64 * 1024,
  /** $ref occurrences (refs compile to grammar rules, never inlined: this bounds resolution work). */
  maxRefs: 1_000,
} as const;

/** Limits of the grammar worker (xgrammar's wasm instance, off the event loop). */
export const GRAMMAR_WORKER_LIMITS = {
  /**
   * A compile running longer is stopped (its worker terminated) and the request refused. Other
   * requests' masks wait behind a compile, so this stays well under the engine's mask timeout (10 s).
   */
  compileTimeoutMs: 5_000,
  /** Any other batch of matcher work (masks of a step, accepts) running longer: the same. */
  opTimeoutMs: 5_000,
  /**
   * An instance whose wasm memory passed this (and grew by half of it since it started: replayed
   * grammars alone never trigger it) is replaced between batches, like after a trap but failing
   * nothing: wasm memory never shrinks, and many large grammars would keep it at its peak.
   */
  maxWasmBytes: 1024 * 1024 * 1024,
  /** A new instance must be ready (tokenizer info built) within this. */
  startTimeoutMs: 60_000,
  /** Instances replaced in a row while replaying live matchers before the rest are failed too. */
  maxRebuildsInARow: 4,
} as const;

export type SchemaLimitName = keyof typeof SCHEMA_LIMITS;
export type WorkerLimits = { [K in keyof typeof GRAMMAR_WORKER_LIMITS]: number };

const MAX_PATH_CHARS = 160;

function shortPath(path: string): string {
  return path.length <= MAX_PATH_CHARS ? path : `${path.slice(0, MAX_PATH_CHARS)}...`;
}

/** A refusal: the prefix names the field (response_format.json_schema.schema or tools[i]...). */
export class SchemaLimitError extends InvalidRequestError {
  constructor(
    readonly limit: SchemaLimitName | 'ref',
    readonly path: string,
    what: string,
  ) {
    super(`${shortPath(path)}: ${what}`, 'response_format');
    this.name = 'SchemaLimitError';
  }
}

function over(limit: SchemaLimitName, path: string, what: string): never {
  throw new SchemaLimitError(limit, path, `${what} exceeds the limit ${limit} = ${SCHEMA_LIMITS[limit]}`);
}

/** Keywords whose value is one subschema, a map of them, or a list of them. */
const ONE = new Set(['items', 'additionalProperties', 'not', 'contains', 'propertyNames', 'if', 'then', 'else', 'unevaluatedItems', 'unevaluatedProperties']);
const MAP = new Set(['properties', '$defs', 'definitions', 'patternProperties', 'dependentSchemas']);
const LIST = new Set(['anyOf', 'oneOf', 'allOf', 'prefixItems']);
/** Keywords whose value is data, not schema. */
const VALUES = new Set(['const', 'enum', 'default', 'examples']);

/**
 * Checks every limit of SCHEMA_LIMITS, then that each `$ref` resolves to a subschema and that the
 * root can produce a finite value. `root` names the schema in messages. Throws SchemaLimitError.
 */
export function checkSchemaLimits(schema: unknown, root = 'response_format.json_schema.schema'): void {
  if (isObject(schema) && passed.has(schema)) return;
  checkJsonShape(schema, root); // first: it bounds the depth every later walk (and stringify) sees
  const nodes = collectSchemas(schema, root);
  checkSizes(schema, root);
  const targets = resolveRefs(schema, nodes);
  checkNesting(schema, root, targets);
  checkFinite(schema, nodes, targets, root);
  if (isObject(schema)) passed.add(schema);
}

/** Schemas (by identity) that passed: a request's schema is checked once on its way to the grammar. */
const passed = new WeakSet<object>();

/**
 * JSON nesting of any request value the grammar or the chat template walks recursively (tool-call
 * arguments arrive as strings, past the body's own depth check): at most maxJsonDepth.
 */
export function checkJsonDepth(value: unknown, path: string): void {
  const stack: { v: unknown; depth: number }[] = [{ v: value, depth: 0 }];
  while (stack.length > 0) {
    const { v, depth } = stack.pop()!;
    if (typeof v !== 'object' || v === null) continue;
    if (depth >= SCHEMA_LIMITS.maxJsonDepth) over('maxJsonDepth', path, `JSON nested ${depth + 1} levels deep`);
    for (const sub of Array.isArray(v) ? v : Object.values(v)) stack.push({ v: sub, depth: depth + 1 });
  }
}

/** A value in an iterative walk; its path is built only for a message (a body holds millions of values). */
interface At {
  v: unknown;
  depth: number;
  parent: At | null;
  key: string | number;
}

function pathOf(root: string, at: At): string {
  const keys: (string | number)[] = [];
  for (let a: At | null = at; a !== null && a.parent !== null; a = a.parent) keys.push(a.key);
  return root + keys.reverse().map((k) => (typeof k === 'number' ? `[${k}]` : `.${k}`)).join('');
}

const nested = (v: unknown): v is object => typeof v === 'object' && v !== null;

/** Depth and enum counts over the raw JSON, iteratively (the document may be 10,000 deep). */
function checkJsonShape(schema: unknown, root: string): void {
  const stack: (At & { inValue: boolean })[] = [{ v: schema, depth: 0, parent: null, key: '', inValue: false }];
  let enumValues = 0;
  // Every value takes 2 bytes of JSON at least: past maxBytes / 2 of them the size check would fail,
  // so it fails here, before a multi-megabyte value is walked and serialized.
  let values = 0;
  const tooMany = () => over('maxBytes', root, `more than ${SCHEMA_LIMITS.maxBytes / 2} values (2 bytes of JSON each at least)`);
  while (stack.length > 0) {
    const at = stack.pop()!;
    const { v, depth, inValue } = at;
    if (!nested(v)) continue;
    if (depth >= SCHEMA_LIMITS.maxJsonDepth) over('maxJsonDepth', pathOf(root, at), `JSON nested ${depth + 1} levels deep`);
    values += Array.isArray(v) ? v.length : Object.keys(v).length;
    if (values > SCHEMA_LIMITS.maxBytes / 2) tooMany();
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) if (nested(v[i])) stack.push({ v: v[i], depth: depth + 1, parent: at, key: i, inValue });
      continue;
    }
    for (const [k, sub] of Object.entries(v)) {
      if (!inValue && k === 'enum' && Array.isArray(sub)) {
        enumValues += sub.length;
        if (enumValues > SCHEMA_LIMITS.maxEnumValues) over('maxEnumValues', `${pathOf(root, at)}.${k}`, `${enumValues} enum values`);
      }
      if (nested(sub)) stack.push({ v: sub, depth: depth + 1, parent: at, key: k, inValue: inValue || VALUES.has(k) });
    }
  }
}

/** Serialized sizes (after the counts, which name what to cut more precisely). Depth is bounded by now. */
function checkSizes(schema: unknown, root: string): void {
  const bytes = Buffer.byteLength(JSON.stringify(schema) ?? '');
  if (bytes > SCHEMA_LIMITS.maxBytes) over('maxBytes', root, `the schema's ${bytes} bytes of JSON`);
  // Within maxBytes from here: a plain walk is cheap.
  let valueBytes = 0;
  const stack: { v: unknown; path: string }[] = [{ v: schema, path: root }];
  while (stack.length > 0) {
    const { v, path } = stack.pop()!;
    if (Array.isArray(v)) v.forEach((x, i) => nested(x) && stack.push({ v: x, path: `${path}[${i}]` }));
    if (!isObject(v)) continue;
    for (const [k, sub] of Object.entries(v)) {
      if (k === 'const' || k === 'enum') {
        valueBytes += Buffer.byteLength(JSON.stringify(sub) ?? '');
        if (valueBytes > SCHEMA_LIMITS.maxValueBytes) over('maxValueBytes', `${path}.${k}`, `${valueBytes} bytes of const and enum values`);
      } else if (!VALUES.has(k) && nested(sub)) stack.push({ v: sub, path: `${path}.${k}` });
    }
  }
}

/** A subschema's subschemas: [keyword path suffix, child, whether it nests output]. */
function children(node: Record<string, unknown>): [string, unknown, boolean][] {
  const out: [string, unknown, boolean][] = [];
  for (const [k, v] of Object.entries(node)) {
    if (ONE.has(k)) out.push([`.${k}`, v, true]);
    else if (MAP.has(k) && isObject(v)) {
      // $defs do not nest output: a definition is as deep as where a $ref uses it.
      const nests = k !== '$defs' && k !== 'definitions';
      for (const [name, sub] of Object.entries(v)) out.push([`.${k}.${name}`, sub, nests]);
    } else if (LIST.has(k) && Array.isArray(v)) v.forEach((sub, i) => out.push([`.${k}[${i}]`, sub, true]));
  }
  return out;
}

/** Every subschema object with its path, parents before children; counts nodes, properties, refs. */
function collectSchemas(schema: unknown, root: string): Map<Record<string, unknown>, string> {
  const seen = new Map<Record<string, unknown>, string>();
  const stack: { node: unknown; path: string }[] = [{ node: schema, path: root }];
  let properties = 0;
  let refs = 0;
  while (stack.length > 0) {
    const f = stack.pop()!;
    if (!isObject(f.node) || seen.has(f.node)) continue;
    seen.set(f.node, f.path);
    if (seen.size > SCHEMA_LIMITS.maxNodes) over('maxNodes', f.path, `${seen.size} subschemas`);
    if (f.node.$ref !== undefined && ++refs > SCHEMA_LIMITS.maxRefs) over('maxRefs', `${f.path}.$ref`, `${refs} $ref`);
    if (isObject(f.node.properties)) {
      properties += Object.keys(f.node.properties).length;
      if (properties > SCHEMA_LIMITS.maxProperties) over('maxProperties', `${f.path}.properties`, `${properties} properties`);
    }
    const kids = children(f.node);
    for (let i = kids.length - 1; i >= 0; i--) stack.push({ node: kids[i]![1], path: f.path + kids[i]![0] });
  }
  return seen;
}

/** Each $ref's target; a ref that does not resolve to a subschema of this document is refused. */
function resolveRefs(schema: unknown, nodes: Map<Record<string, unknown>, string>): Map<unknown, unknown> {
  const targets = new Map<unknown, unknown>();
  for (const [node, path] of nodes) {
    const ref = node.$ref;
    if (ref === undefined) continue;
    if (typeof ref !== 'string' || !(ref === '#' || ref.startsWith('#/'))) {
      throw new SchemaLimitError('ref', `${path}.$ref`, 'only local references ("#/$defs/...") are supported');
    }
    const target = resolvePointer(schema, ref);
    if (!isObject(target) && typeof target !== 'boolean') throw new SchemaLimitError('ref', `${path}.$ref`, `${JSON.stringify(ref)} does not point to a schema in this document`);
    if (isObject(target) && !nodes.has(target)) throw new SchemaLimitError('ref', `${path}.$ref`, `${JSON.stringify(ref)} points inside a value, not to a schema`);
    targets.set(node, target);
  }
  return targets;
}

/**
 * Subschema nesting, following $refs (xgrammar converts a referenced definition where it is first
 * used, so a chain of refs nests like inline schemas; recursion back into an open one ends there).
 * An iterative DFS with each node's height memoized: the longest path is checked, not the first.
 */
function checkNesting(schema: unknown, root: string, targets: Map<unknown, unknown>): void {
  const max = SCHEMA_LIMITS.maxSchemaDepth;
  const height = new Map<unknown, number>();
  const open = new Set<unknown>();
  interface Dfs {
    node: Record<string, unknown>;
    path: string;
    depth: number;
    kids: [string, unknown, boolean][];
    next: number;
    h: number;
  }
  const enter = (node: unknown, path: string, depth: number): Dfs | null => {
    if (!isObject(node) || open.has(node)) return null;
    if (depth > max) over('maxSchemaDepth', path, `subschemas nested ${depth} levels deep (counting $ref)`);
    const known = height.get(node);
    if (known !== undefined) {
      if (depth + known > max) over('maxSchemaDepth', path, `subschemas nested ${depth + known} levels deep (counting $ref)`);
      return null;
    }
    open.add(node);
    const kids = children(node);
    if (targets.has(node)) kids.push(['.$ref', targets.get(node), false]);
    return { node, path, depth, kids, next: 0, h: 0 };
  };
  const stack: Dfs[] = [enter(schema, root, 0)!].filter((f) => f !== null);
  while (stack.length > 0) {
    const f = stack[stack.length - 1]!;
    if (f.next < f.kids.length) {
      const [suffix, child, nests] = f.kids[f.next++]!;
      const w = nests ? 1 : 0;
      const sub = enter(child, f.path + suffix, f.depth + w);
      if (sub !== null) stack.push(sub);
      else if (height.has(child)) f.h = Math.max(f.h, w + height.get(child)!);
      continue;
    }
    stack.pop();
    open.delete(f.node);
    height.set(f.node, f.h);
    const parent = stack[stack.length - 1];
    if (parent !== undefined) {
      const w = parent.kids[parent.next - 1]![2] ? 1 : 0;
      parent.h = Math.max(parent.h, w + f.h);
    }
  }
}

/** The target of a local `$ref` ("#" or "#/a/b" with ~0 ~1 escapes), or undefined. */
function resolvePointer(schema: unknown, ref: string): unknown {
  if (ref === '#') return schema;
  if (!ref.startsWith('#/')) return undefined;
  let at: unknown = schema;
  for (const raw of ref.slice(2).split('/')) {
    const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (Array.isArray(at)) at = at[Number(key)];
    else if (isObject(at)) at = Object.hasOwn(at, key) ? at[key] : undefined;
    else return undefined;
  }
  return at;
}

/**
 * The root must be able to end: a value exists that uses each
 * `$ref` finitely often. Without that ({"$ref": "#"}, a $defs cycle with no optional way out) the
 * grammar can never complete, and decoding would run to max_tokens. A least fixpoint over the
 * subschemas marks the ones with a finite value; recursion through optional properties, anyOf
 * branches and arrays that may be empty is fine (a tree with optional children works).
 */
function checkFinite(schema: unknown, nodes: Map<Record<string, unknown>, string>, targets: Map<unknown, unknown>, root: string): void {
  if (targets.size === 0 || !isObject(schema)) return;
  const finite = new Set<unknown>();
  const ok = (s: unknown): boolean => s === true || (s !== false && (!isObject(s) || finite.has(s)));
  const order = [...nodes.keys()].reverse(); // children first: most nodes settle in one pass
  for (let changed = true; changed; ) {
    changed = false;
    for (const node of order) {
      if (finite.has(node) || !canEnd(node, targets, ok)) continue;
      finite.add(node);
      changed = true;
    }
  }
  if (finite.has(schema)) return;
  const loop = [...targets.keys()].find((n) => !finite.has(n));
  const where = loop === undefined ? root : `${nodes.get(loop as Record<string, unknown>)}.$ref`;
  throw new SchemaLimitError('ref', where, 'this $ref recurses with no way to end (every value would be infinite): make the recursion optional');
}

function canEnd(s: Record<string, unknown>, targets: Map<unknown, unknown>, ok: (s: unknown) => boolean): boolean {
  if (targets.has(s) && !ok(targets.get(s))) return false;
  if (s.const !== undefined || Array.isArray(s.enum)) return true;
  for (const k of ['anyOf', 'oneOf'] as const) {
    const list = s[k];
    if (Array.isArray(list) && !list.some(ok)) return false;
  }
  if (Array.isArray(s.allOf) && !s.allOf.every(ok)) return false;
  const types = Array.isArray(s.type) ? s.type : s.type === undefined ? null : [s.type];
  // A type other than object/array always has a finite value.
  if (types !== null && types.some((t) => t !== 'object' && t !== 'array')) return true;
  const props = isObject(s.properties) ? s.properties : {};
  const required = Array.isArray(s.required) ? s.required : [];
  const objectOk = required.every((k) => typeof k !== 'string' || !Object.hasOwn(props, k) || ok(props[k]));
  const prefix = Array.isArray(s.prefixItems) ? s.prefixItems : [];
  const minItems = typeof s.minItems === 'number' ? s.minItems : 0;
  const arrayOk = prefix.every(ok) && (minItems <= prefix.length || s.items === undefined || ok(s.items));
  if (types === null) return objectOk && arrayOk;
  return (types.includes('object') && objectOk) || (types.includes('array') && arrayOk);
}
