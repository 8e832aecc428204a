// The shape of a JSON text, found without recursion and without parsing: a scan that counts brackets
// outside strings and skips string bodies with a native search (fast on long base64 images). Deep
// nesting overflows the stack of code that walks the parsed value; many values make JSON.parse
// itself hold the event loop (100,000 messages: ~25 ms; 8 MB of [1,1,...]: ~450 ms), so all three
// are refused before parsing. The scan stops at the first limit passed.

export interface JsonShapeLimits {
  maxDepth: number;
  /** Objects ({...}), the costliest values to parse. */
  maxObjects: number;
  /** Array elements and object members, counted by their separators and containers. */
  maxValues: number;
}

export type JsonShapeProblem = { kind: 'depth' | 'objects' | 'values'; at: number } | null;

/**
 * Where `bytes` first passes one of `limits`, or null. Malformed JSON is left for JSON.parse to
 * report; this only has to be right for the text that parses.
 */
export function jsonShapeProblem(bytes: Uint8Array, limits: JsonShapeLimits): JsonShapeProblem {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const { maxDepth, maxObjects, maxValues } = limits;
  let depth = 0;
  let objects = 0;
  let values = 0;
  for (let i = 0; i < buf.length; i++) {
    const c = buf[i]!;
    if (c === 0x22) {
      i = stringEnd(buf, i + 1);
      if (i < 0) return null; // unterminated: JSON.parse says so
    } else if (c === 0x2c) {
      if (++values > maxValues) return { kind: 'values', at: i };
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > maxDepth) return { kind: 'depth', at: i };
      if (c === 0x7b && ++objects > maxObjects) return { kind: 'objects', at: i };
      if (++values > maxValues) return { kind: 'values', at: i };
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return null;
}

/** The offset of the quote that closes a string whose body starts at `from`, or -1. */
function stringEnd(buf: Buffer, from: number): number {
  let at = from;
  for (;;) {
    const q = buf.indexOf(0x22, at);
    if (q < 0) return -1;
    let slashes = 0;
    for (let k = q - 1; k >= from && buf[k] === 0x5c; k--) slashes++;
    if (slashes % 2 === 0) return q;
    at = q + 1;
  }
}
