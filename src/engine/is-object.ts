// The one check every request-body and JSON-schema walker makes before reading fields.

/** A JSON object: not null, not an array. */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
