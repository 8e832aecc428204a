// `--schema FILE`: the JSON Schema sent as response_format, and ajv's check of every reply against it.
// ajv is imported only when a schema is given, so plain text benches never need it.
import { readFileSync } from 'node:fs';

export interface SchemaCheck {
  /** The JSON Schema as read from the file. */
  schema: Record<string, unknown>;
  /** null when the value satisfies the schema, else ajv's first errors as text. */
  violation(value: unknown): string | null;
}

interface AjvLike {
  compile(schema: object): { (data: unknown): boolean; errors?: unknown };
  errorsText(errors?: unknown): string;
}
type AjvCtor = new (opts: Record<string, unknown>) => AjvLike;

export async function loadSchemaCheck(file: string): Promise<SchemaCheck> {
  let schema: unknown;
  try {
    schema = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`--schema ${file}: ${(err as Error).message}`);
  }
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) throw new Error(`--schema ${file}: a JSON Schema must be an object`);
  let mod: { default?: unknown; Ajv?: unknown };
  try {
    mod = (await import('ajv')) as { default?: unknown; Ajv?: unknown };
  } catch (err) {
    throw new Error(`--schema needs the "ajv" package to validate replies: ${(err as Error).message}`);
  }
  // ajv is CommonJS: under ESM the class is the named export or default (or default.default).
  const def = mod.default as { default?: unknown } | undefined;
  const Ctor = (mod.Ajv ?? def?.default ?? def) as AjvCtor;
  const ajv = new Ctor({ allErrors: true, strict: false });
  let validate: ReturnType<AjvLike['compile']>;
  try {
    validate = ajv.compile(schema);
  } catch (err) {
    throw new Error(`--schema ${file}: not a valid JSON Schema: ${(err as Error).message}`);
  }
  return {
    schema: schema as Record<string, unknown>,
    violation(value: unknown) {
      return validate(value) ? null : ajv.errorsText(validate.errors).slice(0, 300);
    },
  };
}
