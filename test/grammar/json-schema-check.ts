// A small JSON Schema validator for the subset rapid constrains to (tests only): returns the first
// violation as a path and reason, or null when the value is valid.
type Schema = Record<string, unknown> | boolean;

function typeOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

function typeMatches(t: string, v: unknown): boolean {
  const actual = typeOf(v);
  return t === actual || (t === 'number' && actual === 'integer');
}

export function schemaViolation(schema: Schema, v: unknown, path = '$', root: Schema = schema): string | null {
  if (schema === true) return null;
  if (schema === false) return `${path}: no value allowed`;
  const s = schema;
  if (typeof s.$ref === 'string') {
    const target = s.$ref.slice(2).split('/').reduce<unknown>((o, k) => (o as Record<string, unknown>)[k], root);
    return schemaViolation(target as Schema, v, path, root);
  }
  if (s.type !== undefined) {
    const types = Array.isArray(s.type) ? (s.type as string[]) : [s.type as string];
    if (!types.some((t) => typeMatches(t, v))) return `${path}: expected ${types.join('|')}, got ${typeOf(v)}`;
  }
  if (s.enum && !(s.enum as unknown[]).some((e) => JSON.stringify(e) === JSON.stringify(v))) return `${path}: not in enum`;
  if ('const' in s && JSON.stringify(s.const) !== JSON.stringify(v)) return `${path}: not the const`;
  if (s.anyOf && !(s.anyOf as Schema[]).some((sub) => schemaViolation(sub, v, path, root) === null)) return `${path}: matches no anyOf branch`;
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
        const e = schemaViolation(s.items as Schema, v[i], `${path}[${i}]`, root);
        if (e) return e;
      }
    }
  }
  if (typeOf(v) === 'object') {
    const o = v as Record<string, unknown>;
    const props = (s.properties ?? {}) as Record<string, Schema>;
    for (const r of (s.required ?? []) as string[]) if (!(r in o)) return `${path}: missing required "${r}"`;
    for (const [k, val] of Object.entries(o)) {
      if (k in props) {
        const e = schemaViolation(props[k]!, val, `${path}.${k}`, root);
        if (e) return e;
      } else if (s.additionalProperties !== undefined) {
        const e = schemaViolation(s.additionalProperties as Schema, val, `${path}.${k}`, root);
        if (e) return e;
      }
    }
  }
  return null;
}
