// A stable 32-bit hash of a token context, for fake models whose logits are a pure function of it.
export function mix(a: number, b: number): number {
  let h = Math.imul(a ^ (b + 0x9e3779b9), 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  return (h ^ (h >>> 16)) >>> 0;
}

export function hashOf(ids: readonly number[]): number {
  let h = 0x811c9dc5;
  for (const t of ids) h = mix(h, t);
  return h;
}
