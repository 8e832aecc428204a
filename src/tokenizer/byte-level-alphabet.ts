// GPT-2's reversible byte <-> printable-character mapping used by ByteLevel pre-tokenizers and decoders.

function buildByteToChar(): string[] {
  const printable: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const table: string[] = new Array<string>(256);
  const isPrintable = new Set(printable);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    // Non-printable bytes are shifted past 255 so every byte maps to a visible code point.
    table[b] = String.fromCodePoint(isPrintable.has(b) ? b : 256 + n++);
  }
  return table;
}

/** BYTE_TO_CHAR[b] is the character that stands for byte b. */
export const BYTE_TO_CHAR: readonly string[] = buildByteToChar();

/** Inverse of BYTE_TO_CHAR. */
export const CHAR_TO_BYTE: ReadonlyMap<string, number> = new Map(BYTE_TO_CHAR.map((c, b) => [c, b]));

const encoder = new TextEncoder();

/** Maps a string's UTF-8 bytes to the byte-level alphabet. */
export function toByteLevel(text: string): string {
  const bytes = encoder.encode(text);
  let out = '';
  for (let i = 0; i < bytes.length; i++) out += BYTE_TO_CHAR[bytes[i]!];
  return out;
}
