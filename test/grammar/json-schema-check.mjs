// A small JSON Schema validator for the subset rapid constrains to (tests only): returns the first
// violation as a path and reason, or null when the value is valid. Plain JavaScript: the bare-node
// test/cuda/serve-checks.mjs uses it as well as the vitest suites.

/** @typedef {Record<string, unknown> | boolean} Schema */

/** @param {unknown} v */
function typeOf(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

/** @param {string} t @param {unknown} v */
function typeMatches(t, v) {
  const actual = typeOf(v);
  return t === actual || (t === 'number' && actual === 'integer');
}

/**
 * @param {Schema} schema
 * @param {unknown} v
 * @param {string} [path]
 * @param {Schema} [root]
 * @returns {string | null}
 */
export function schemaViolation(schema, v, path = '$', root = schema) {
  if (schema === true) return null;
  if (schema === false) return `${path}: no value allowed`;
  const s = schema;
  if (typeof s.$ref === 'string') {
    const target = s.$ref.slice(2).split('/').reduce((o, k) => o[k], root);
    return schemaViolation(target, v, path, root);
  }
  if (s.type !== undefined) {
    const types = Array.isArray(s.type) ? s.type : [s.type];
    if (!types.some((t) => typeMatches(t, v))) return `${path}: expected ${types.join('|')}, got ${typeOf(v)}`;
  }
  if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) return `${path}: not in enum`;
  if ('const' in s && JSON.stringify(s.const) !== JSON.stringify(v)) return `${path}: not the const`;
  if (s.anyOf && !s.anyOf.some((sub) => schemaViolation(sub, v, path, root) === null)) return `${path}: matches no anyOf branch`;
  if (typeof v === 'number') {
    if (typeof s.minimum === 'number' && v < s.minimum) return `${path}: below minimum`;
    if (typeof s.maximum === 'number' && v > s.maximum) return `${path}: above maximum`;
  }
  if (typeof v === 'string') {
    const n = [...v].length;
    if (typeof s.minLength === 'number' && n < s.minLength) return `${path}: shorter than minLength`;
    if (typeof s.maxLength === 'number' && n > s.maxLength) return `${path}: longer than maxLength`;
    if (typeof s.pattern === 'string' && !new RegExp(s.pattern, 'u').test(v)) return `${path}: does not match pattern`;
  }
  if (Array.isArray(v)) {
    if (typeof s.minItems === 'number' && v.length < s.minItems) return `${path}: fewer than minItems`;
    if (typeof s.maxItems === 'number' && v.length > s.maxItems) return `${path}: more than maxItems`;
    if (s.items !== undefined) {
      for (let i = 0; i < v.length; i++) {
        const e = schemaViolation(s.items, v[i], `${path}[${i}]`, root);
        if (e) return e;
      }
    }
  }
  if (typeOf(v) === 'object') {
    const o = /** @type {Record<string, unknown>} */ (v);
    const props = s.properties ?? {};
    for (const r of s.required ?? []) if (!(r in o)) return `${path}: missing required "${r}"`;
    for (const [k, val] of Object.entries(o)) {
      if (k in props) {
        const e = schemaViolation(props[k], val, `${path}.${k}`, root);
        if (e) return e;
      } else if (s.additionalProperties !== undefined) {
        const e = schemaViolation(s.additionalProperties, val, `${path}.${k}`, root);
        if (e) return e;
      }
    }
  }
  return null;
}
