// Paged KV bookkeeping: allocation is all-or-nothing, refcounted sharing, prefix lookup over full
// blocks only (always leaving a token to compute), eviction of the least recently freed block.
import { describe, expect, it } from 'vitest';
import { BlockManager } from '../../src/engine/block-manager.js';
import { EngineRequest } from '../../src/engine/request.js';
import { byteTextStream, params } from './helpers.js';

let n = 0;
function req(tokens: number[], salt?: string): EngineRequest {
  return new EngineRequest({
    id: `r${++n}`,
    promptIds: tokens,
    params: params(),
    maxTotalTokens: 1000,
    stopTokenIds: new Set(),
    text: byteTextStream(),
    cacheSalt: salt,
  });
}
const seq = (len: number, from = 1) => Array.from({ length: len }, (_, i) => from + i);

/** Allocates and "computes" the whole prompt, registering full blocks. */
function compute(bm: BlockManager, r: EngineRequest): void {
  const prefix = bm.lookupPrefix(r);
  expect(bm.allocate(r, prefix, r.tokens.length)).toBe(true);
  r.numComputed = r.tokens.length;
  bm.commit(r);
}

describe('BlockManager', () => {
  it('allocates all or nothing and frees back to the pool', () => {
    const bm = new BlockManager({ numBlocks: 4, blockSize: 4 });
    const a = req(seq(10));
    expect(bm.allocate(a, [], 10)).toBe(true);
    expect(a.blockTable).toEqual([0, 1, 2]);
    const b = req(seq(8));
    expect(bm.allocate(b, [], 8)).toBe(false);
    expect(b.blockTable).toEqual([]);
    expect(bm.freeBlocks).toBe(1);
    bm.free(a);
    expect(bm.freeBlocks).toBe(4);
    expect(bm.allocate(b, [], 8)).toBe(true);
  });

  it('shares full cached blocks and never the last token', () => {
    const bm = new BlockManager({ numBlocks: 16, blockSize: 4 });
    const a = req(seq(10));
    compute(bm, a);
    // 10 tokens: 2 full blocks registered, the partial third is not.
    const b = req(seq(10));
    expect(bm.lookupPrefix(b)).toEqual(a.blockTable.slice(0, 2));
    // Exactly 8 tokens: only 1 block may be reused, the 8th token must be computed.
    const c = req(seq(8));
    expect(bm.lookupPrefix(c)).toEqual(a.blockTable.slice(0, 1));
    // Chained: a different first block means no hit on the second.
    const d = req([99, ...seq(9, 2)]);
    expect(bm.lookupPrefix(d)).toEqual([]);
    // Salts separate caches.
    expect(bm.lookupPrefix(req(seq(10), 'other'))).toEqual([]);
    // Shared blocks are refcounted: freeing one user keeps them for the other.
    compute(bm, b);
    expect(b.blockTable.slice(0, 2)).toEqual(a.blockTable.slice(0, 2));
    expect(bm.usedBlocks).toBe(4);
    bm.free(a);
    expect(bm.usedBlocks).toBe(3);
    bm.free(b);
    expect(bm.usedBlocks).toBe(0);
    expect(bm.stats().cachedBlocks).toBe(2);
  });

  it('reuses a freed cached prefix, and evicts the least recently freed, tail first', () => {
    const bm = new BlockManager({ numBlocks: 4, blockSize: 2 });
    const a = req(seq(5)); // 2 full blocks + 1 partial
    compute(bm, a);
    const [a0, a1] = a.blockTable;
    bm.free(a);
    // Freed cached blocks still count as free, and a lookup finds them.
    expect(bm.freeBlocks).toBe(4);
    const again = req(seq(5));
    const hit = bm.lookupPrefix(again);
    expect(hit).toEqual([a0, a1]);
    expect(bm.allocate(again, hit, 5)).toBe(true);
    expect(bm.usedBlocks).toBe(3);
    bm.free(again);
    // Needing 3 fresh blocks: the 2 empty ones go first, then the tail block a1 is evicted.
    const other = req(seq(6, 50));
    expect(bm.allocate(other, [], 6)).toBe(true);
    expect(other.blockTable).toContain(a1);
    expect(other.blockTable).not.toContain(a0);
    expect(bm.lookupPrefix(req(seq(5)))).toEqual([a0]);
  });

  it('counts cached prefix blocks against capacity when they are unreferenced', () => {
    const bm = new BlockManager({ numBlocks: 3, blockSize: 2 });
    const a = req(seq(4));
    compute(bm, a);
    bm.free(a); // 2 cached, 1 empty
    const b = req([...seq(4), 9, 9, 9]); // hits 2 blocks, needs 2 more: 4 > 3
    const hit = bm.lookupPrefix(b);
    expect(hit.length).toBe(2);
    expect(bm.allocate(b, hit, 7)).toBe(false);
    expect(bm.freeBlocks).toBe(3);
    expect(bm.allocate(b, hit, 6)).toBe(true);
  });
});
