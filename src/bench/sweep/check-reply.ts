// Checks of a complete reply's content: empty text fails; a structured-output reply must parse as
// JSON and satisfy the schema. Transport failures are left as they are.
import type { RequestOutcome } from './outcome.js';
import type { SchemaCheck } from './schema-validator.js';

export function checkReply(out: RequestOutcome, schema?: SchemaCheck): RequestOutcome {
  if (!out.ok) return out;
  if (out.content.trim() === '') {
    const verdict = out.kind === 'schema' ? { jsonValid: false, schemaValid: false } : {};
    return { ...out, ...verdict, ok: false, failure: 'empty_content', error: `no content (finish_reason ${out.finishReason ?? 'none'})` };
  }
  if (out.kind !== 'schema' || !schema) return out;
  let value: unknown;
  try {
    value = JSON.parse(out.content);
  } catch (err) {
    return { ...out, ok: false, jsonValid: false, schemaValid: false, failure: 'invalid_json', error: `${(err as Error).message} (finish_reason ${out.finishReason ?? 'none'})`.slice(0, 200) };
  }
  const violation = schema.violation(value);
  if (violation !== null) return { ...out, ok: false, jsonValid: true, schemaValid: false, failure: 'schema_violation', error: violation };
  return { ...out, jsonValid: true, schemaValid: true };
}
