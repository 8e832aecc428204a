// What a constrained request's grammar is compiled from: a JSON object, or a JSON Schema (the subset
// schema-support.ts checks). The wire formats that carry it are parsed in server/ (response-format.ts).
export type GrammarSpec = { type: 'json_object' } | { type: 'json_schema'; name: string; schema: unknown; strict: boolean };
