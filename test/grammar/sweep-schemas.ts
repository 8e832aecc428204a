// The schemas of the validity sweeps (text and VLM): nested objects, arrays, enums, required
// fields, patterns, bounded integers and numbers.
export const SWEEP_SCHEMAS: Record<string, unknown>[] = [
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
    properties: { tags: { type: 'array', items: { enum: ['x', 'y', 'z'] }, minItems: 1, maxItems: 3 }, count: { type: 'integer', minimum: 0, maximum: 9 } },
    required: ['tags', 'count'],
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
  { type: 'array', items: { type: 'object', properties: { k: { enum: [1, 2, 3] } }, required: ['k'], additionalProperties: false }, minItems: 1, maxItems: 2 },
];
