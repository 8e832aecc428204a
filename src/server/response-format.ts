// OpenAI's response_format of a request, checked, to the engine's grammar spec: json_object, or
// json_schema with the schema subset the grammar enforces. The server parses request bodies with it;
// the CLI (--schema, --json-object) builds the same wire object and parses it here too.
import { InvalidRequestError } from '../errors/request-errors.js';
import type { GrammarSpec } from '../engine/grammar/grammar-spec.js';
import { checkSchemaLimits } from '../engine/grammar/schema-limits.js';
import { checkSchemaSupported } from '../engine/grammar/schema-support.js';
import { isObject } from '../engine/is-object.js';

/** A parsed response_format is the engine's grammar spec. */
export type ResponseFormat = GrammarSpec;

const bad = (message: string) => new InvalidRequestError(message, 'response_format');

/** Parses an OpenAI response_format; null for {"type": "text"}. Throws InvalidRequestError. */
export function parseResponseFormat(raw: unknown): ResponseFormat | null {
  if (!isObject(raw) || typeof raw.type !== 'string') throw bad('response_format must be an object with a type');
  if (raw.type === 'text') return null;
  if (raw.type === 'json_object') {
    // llama.cpp / vLLM style (instructor's JSON_SCHEMA mode): a schema beside json_object constrains to it.
    if (raw.schema === undefined || raw.schema === null) return { type: 'json_object' };
    if (!isObject(raw.schema)) throw bad('response_format.schema must be a JSON Schema object');
    return { type: 'json_schema', name: 'schema', schema: checkedSchema(raw.schema, 'response_format.schema'), strict: true };
  }
  if (raw.type !== 'json_schema') throw bad(`response_format.type must be text, json_object or json_schema, got "${raw.type}"`);
  const js = raw.json_schema;
  if (!isObject(js)) throw bad('response_format.json_schema must be an object with a schema');
  if (js.name !== undefined && typeof js.name !== 'string') throw bad('response_format.json_schema.name must be a string');
  if (js.strict !== undefined && js.strict !== null && typeof js.strict !== 'boolean') throw bad('response_format.json_schema.strict must be a boolean');
  const schema = checkedSchema(js.schema ?? {}, NESTED_AT);
  return { type: 'json_schema', name: typeof js.name === 'string' ? js.name : 'schema', schema, strict: js.strict === true };
}

const NESTED_AT = 'response_format.json_schema.schema';

/** The schema, checked: limits first (the walks after it recurse), then the subset the grammar enforces. */
function checkedSchema(schema: unknown, at: string): unknown {
  checkSchemaLimits(schema, at);
  try {
    checkSchemaSupported(schema);
  } catch (err) {
    // checkSchemaSupported names paths under json_schema.schema; json_object's schema sits elsewhere.
    if (err instanceof InvalidRequestError && at !== NESTED_AT && err.message.startsWith(NESTED_AT)) throw bad(at + err.message.slice(NESTED_AT.length));
    throw err;
  }
  return schema;
}
