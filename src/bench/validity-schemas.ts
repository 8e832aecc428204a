// The schemas of the structured-output validity sweep (bench/validity and its CI test): nested
// objects, enums, bounded numbers, patterns, arrays with minItems, strings with code-point lengths.
export const VALIDITY_SCHEMAS: Record<string, unknown>[] = [
  {
    type: 'object',
    properties: {
      user: {
        type: 'object',
        properties: { id: { type: 'integer', minimum: 1, maximum: 999 }, role: { enum: ['admin', 'guest'] } },
        required: ['id', 'role'],
        additionalProperties: false,
      },
      active: { type: 'boolean' },
    },
    required: ['user', 'active'],
    additionalProperties: false,
  },
  {
    type: 'object',
    properties: { code: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{2}$' }, note: { type: 'string', maxLength: 5 } },
    required: ['code'],
    additionalProperties: false,
  },
  {
    type: 'object',
    properties: { score: { type: 'number', minimum: -1, maximum: 1 }, level: { type: 'integer', exclusiveMinimum: 0, exclusiveMaximum: 5 } },
    required: ['score', 'level'],
    additionalProperties: false,
  },
  {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 3 },
      city: { type: 'string', minLength: 2, maxLength: 6 },
      tags: { type: 'array', items: { type: 'string', maxLength: 2 }, minItems: 1, maxItems: 3 },
    },
    required: ['name', 'city', 'tags'],
    additionalProperties: false,
  },
  { type: 'array', items: { type: 'object', properties: { k: { enum: [1, 2, 3] }, v: { type: 'string' } }, required: ['k', 'v'], additionalProperties: false }, minItems: 1, maxItems: 3 },
  { type: 'object', properties: { title: { type: 'string' }, body: { type: 'string', minLength: 4 } }, required: ['title', 'body'] },
];
