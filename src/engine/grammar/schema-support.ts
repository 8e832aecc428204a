// The JSON Schema subset rapid constrains decoding to. Anything else is refused up front with the
// construct named: a keyword the grammar would silently ignore could let invalid output through.
import { InvalidRequestError } from '../../errors/request-errors.js';
import { isObject } from '../is-object.js';

/** Keywords that only annotate a schema; they never constrain output. */
const ANNOTATIONS = new Set(['title', 'description', 'default', 'examples', '$schema', '$id', '$comment', 'deprecated', 'readOnly', 'writeOnly']);

/** Keywords the grammar enforces. */
const SUPPORTED = new Set([
  'type', 'properties', 'required', 'additionalProperties', 'enum', 'const', 'items', 'prefixItems', 'minItems', 'maxItems',
  'anyOf', 'oneOf', '$ref', '$defs', 'definitions', 'pattern', 'minLength', 'maxLength', 'minimum', 'maximum',
  'exclusiveMinimum', 'exclusiveMaximum', 'format',
]);

const TYPES = new Set(['object', 'array', 'string', 'integer', 'number', 'boolean', 'null']);
const FORMATS = new Set(['date', 'time', 'date-time', 'email', 'uuid', 'uri', 'ipv4', 'ipv6', 'hostname', 'duration']);

function fail(path: string, what: string): never {
  throw new InvalidRequestError(`response_format.json_schema.schema${path}: ${what}`, 'response_format');
}

/** Throws InvalidRequestError naming the first unsupported construct of `schema`. */
export function checkSchemaSupported(schema: unknown, path = ''): void {
  if (schema === true || schema === false) return;
  if (!isObject(schema)) fail(path, 'a schema must be an object');
  for (const [key, value] of Object.entries(schema)) {
    if (ANNOTATIONS.has(key)) continue;
    if (!SUPPORTED.has(key)) fail(path, `the JSON Schema keyword "${key}" is not supported`);
    const at = `${path}.${key}`;
    switch (key) {
      case 'type': {
        const types = Array.isArray(value) ? value : [value];
        for (const t of types) if (typeof t !== 'string' || !TYPES.has(t)) fail(at, `unsupported type ${JSON.stringify(t)}`);
        break;
      }
      case 'properties':
      case '$defs':
      case 'definitions':
        if (!isObject(value)) fail(at, 'must be an object of schemas');
        for (const [k, sub] of Object.entries(value)) checkSchemaSupported(sub, `${at}.${k}`);
        break;
      case 'required':
        if (!Array.isArray(value) || !value.every((x) => typeof x === 'string')) fail(at, 'must be an array of strings');
        break;
      case 'additionalProperties':
      case 'items':
        if (typeof value !== 'boolean') checkSchemaSupported(value, at);
        break;
      case 'prefixItems':
      case 'anyOf':
      case 'oneOf':
        if (!Array.isArray(value) || value.length === 0) fail(at, 'must be a non-empty array of schemas');
        value.forEach((sub, i) => checkSchemaSupported(sub, `${at}[${i}]`));
        break;
      case 'const':
        break;
      case 'enum':
        if (!Array.isArray(value) || value.length === 0) fail(at, 'must be a non-empty array');
        break;
      case '$ref':
        if (typeof value !== 'string' || !(value === '#' || value.startsWith('#/'))) fail(at, 'only local references ("#/$defs/...") are supported');
        break;
      case 'format':
        if (typeof value !== 'string' || !FORMATS.has(value)) fail(at, `the string format ${JSON.stringify(value)} is not supported`);
        break;
      case 'pattern':
        if (typeof value !== 'string') fail(at, 'must be a string');
        if (/\(\?<?[=!]/.test(value)) fail(at, 'lookaround assertions in patterns are not supported');
        break;
      default:
        if (typeof value !== 'number' || !Number.isFinite(value)) fail(at, 'must be a number');
    }
  }
}
