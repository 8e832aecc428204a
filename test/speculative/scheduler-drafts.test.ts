// Drafts in the scheduler as plain data: a draft counts against the step's token budget and leaves
// room for every other decode, is only added where its KV slots fit without preempting, and the
// blocks of rejected draft slots go back to the pool.
import { describe, expect, it } from 'vitest';
import { BlockManager } from '../../src/engine/block-manager.js';
import { EngineRequest } from '../../src/engine/request.js';
import { Scheduler } from '../../src/engine/scheduler.js';
import { byteTextStream, params } from '../engine/helpers.js';

function req(id: string, len: number): EngineRequest {
  return new EngineRequest({
    id,
    promptIds: Array.from({ length: len }, (_, i) => (i * 7 + id.charCodeAt(0)) % 250),
    params: params({ maxTokens: 100 }),
    maxTotalTokens: 10_000,
    stopTokenIds: new Set(),
    text: byteTextStream(),
  });
}

describe('Scheduler with drafts', () => {
  it('counts draft tokens in the budget, keeps room for the other decodes, and trims rejected slots', () => {
    const blocks = new BlockManager({ numBlocks: 64, blockSize: 4, enablePrefixCache: false });
    const s = new Scheduler({ maxNumSeqs: 8, maxBatchedTokens: 12, maxWaiting: 8 }, blocks);
    const asked: number[] = [];
    s.draftFor = (_r, room) => {
      asked.push(room);
      return Array.from({ length: Math.min(8, room) }, (_, i) => i + 1);
    };
    const a = req('a', 4);
    const b = req('b', 4);
    s.add(a);
    s.add(b);
    let out = s.schedule(); // both prefill: no drafts
    expect(out.rows.every((r) => r.draft === undefined)).toBe(true);
    s.completeStep(out);
    for (const r of out.rows) r.request.appendToken(120);
    out = s.schedule();
    // budget 12, two decodes: a gets room 12 - 1 - 1 = 10 (8 drafted), b the 12 - 9 - 1 = 2 left.
    expect(out.rows.map((r) => [r.request.id, r.numTokens, r.draft?.length ?? 0])).toEqual([
      ['a', 1, 8],
      ['b', 1, 2],
    ]);
    expect(asked).toEqual([10, 2]);
    expect(out.numTokens).toBe(12);
    expect(a.blockTable.length).toBe(blocks.blocksFor(4 + 1 + 8));
    s.completeStep(out);
    // a kept 2 of 8: 3 more tokens are known, 2 of them computed; the blocks past the next slot go back.
    const before = blocks.freeBlocks;
    s.acceptDraft(a, 2);
    expect(a.numComputed).toBe(7);
    expect(a.blockTable.length).toBe(blocks.blocksFor(8));
    expect(blocks.freeBlocks).toBe(before + blocks.blocksFor(13) - blocks.blocksFor(8));
  });

  it('drops a draft whose slots do not fit rather than preempting anyone', () => {
    const blocks = new BlockManager({ numBlocks: 3, blockSize: 4, enablePrefixCache: false });
    const s = new Scheduler({ maxNumSeqs: 8, maxBatchedTokens: 64, maxWaiting: 8 }, blocks);
    s.draftFor = () => [1, 2, 3, 4, 5, 6, 7, 8];
    const a = req('a', 3);
    const b = req('b', 3);
    s.add(a);
    s.add(b);
    let out = s.schedule();
    s.completeStep(out);
    for (const r of out.rows) r.request.appendToken(120);
    out = s.schedule();
    expect(out.preempted).toEqual([]);
    expect(out.rows.map((r) => r.draft?.length ?? 0)).toEqual([0, 0]);
  });
});
