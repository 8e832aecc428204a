// Which engine of several takes a request: the one that most recently took the longest prefix of
// its prompt (its KV prefix cache likely still holds it), unless that engine already carries more
// than its share (bounded loads: LOAD_FACTOR x the mean); otherwise the least-loaded engine.

/** Tokens per routing block (the KV prefix cache's default block size). */
export const ROUTE_BLOCK_TOKENS = 16;
/** Blocks of a prompt that are remembered; longer shared prefixes route the same as 1024 tokens. */
const MAX_ROUTE_BLOCKS = 64;
/** Remembered block hashes, oldest forgotten first. */
const MAX_REMEMBERED = 200_000;
/** An engine takes an affine request while it carries at most this many times the mean load. */
export const LOAD_FACTOR = 1.5;

/** Chained hashes of the prompt's full blocks: hash i covers tokens [0, 16(i+1)), salted. */
export function prefixBlockHashes(promptIds: readonly number[], salt = ''): number[] {
  let h = 0x811c9dc5;
  for (let i = 0; i < salt.length; i++) h = Math.imul(h ^ salt.charCodeAt(i), 0x01000193);
  const blocks = Math.min(MAX_ROUTE_BLOCKS, Math.floor(promptIds.length / ROUTE_BLOCK_TOKENS));
  const out: number[] = [];
  for (let b = 0; b < blocks; b++) {
    for (let t = b * ROUTE_BLOCK_TOKENS; t < (b + 1) * ROUTE_BLOCK_TOKENS; t++) h = Math.imul(h ^ promptIds[t]!, 0x01000193) >>> 0;
    out.push(h);
  }
  return out;
}

export class PrefixRouter {
  /** Block hash -> the engine that last took a prompt with that prefix (insertion order = age). */
  private readonly owner = new Map<number, number>();

  /**
   * The engine for a prompt with these block hashes, given each engine's open requests and
   * whether it can take one now. -1 when none can.
   */
  pick(hashes: readonly number[], loads: readonly number[], available: readonly boolean[]): number {
    const open = loads.map((_, i) => i).filter((i) => available[i]);
    if (open.length === 0) return -1;
    const total = open.reduce((s, i) => s + loads[i]!, 0);
    const bound = Math.max(1, Math.ceil((LOAD_FACTOR * (total + 1)) / open.length));
    for (let b = hashes.length - 1; b >= 0; b--) {
      const e = this.owner.get(hashes[b]!);
      if (e !== undefined && available[e] && loads[e]! + 1 <= bound) return this.remember(hashes, e);
      if (e !== undefined) break; // the longest cached prefix is on a busy engine: balance instead
    }
    let best = open[0]!;
    for (const i of open) if (loads[i]! < loads[best]!) best = i;
    return this.remember(hashes, best);
  }

  private remember(hashes: readonly number[], engine: number): number {
    for (const h of hashes) {
      this.owner.delete(h); // re-inserted as the newest
      this.owner.set(h, engine);
    }
    while (this.owner.size > MAX_REMEMBERED) this.owner.delete(this.owner.keys().next().value!);
    return engine;
  }
}
