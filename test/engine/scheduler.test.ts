// The scheduler as plain data: token budget with chunked prefill, decodes first, max running
// sequences, FCFS with a bounded queue, preemption of the newest request when KV runs out.
import { describe, expect, it } from 'vitest';
import { BlockManager } from '../../src/engine/block-manager.js';
import { EngineUnavailableError } from '../../src/engine/engine-errors.js';
import { EngineRequest } from '../../src/engine/request.js';
import { Scheduler, type SchedulerOutput } from '../../src/engine/scheduler.js';
import { byteTextStream, params } from './helpers.js';

function req(id: string, len: number, maxTokens = 100): EngineRequest {
  return new EngineRequest({
    id,
    promptIds: Array.from({ length: len }, (_, i) => (i * 7 + id.charCodeAt(0)) % 250),
    params: params({ maxTokens }),
    maxTotalTokens: 10_000,
    stopTokenIds: new Set(),
    text: byteTextStream(),
  });
}

/** Completes a step as the engine would: advance, then append a token to every sampling row. */
function finishStep(s: Scheduler, out: SchedulerOutput): void {
  s.completeStep(out);
  for (const r of out.rows) if (r.sample) r.request.appendToken(120);
}

const summary = (out: SchedulerOutput) => out.rows.map((r) => `${r.request.id}:${r.contextLen}+${r.numTokens}${r.sample ? '*' : ''}`);

describe('Scheduler', () => {
  it('chunks prefill under the token budget and puts decodes first', () => {
    const s = new Scheduler({ maxNumSeqs: 8, maxBatchedTokens: 8, maxWaiting: 8 }, new BlockManager({ numBlocks: 64, blockSize: 4 }));
    s.add(req('a', 3));
    s.add(req('b', 10));
    s.add(req('c', 4));
    let out = s.schedule();
    expect(summary(out)).toEqual(['a:0+3*', 'b:0+5']);
    finishStep(s, out);
    out = s.schedule();
    // a decodes first, b continues its prefill, c gets what is left.
    expect(summary(out)).toEqual(['a:3+1*', 'b:5+5*', 'c:0+2']);
    finishStep(s, out);
    out = s.schedule();
    expect(summary(out)).toEqual(['a:4+1*', 'b:10+1*', 'c:2+2*']);
    expect(out.numTokens).toBe(4);
  });

  it('caps running sequences and admits in arrival order', () => {
    const s = new Scheduler({ maxNumSeqs: 2, maxBatchedTokens: 100, maxWaiting: 8 }, new BlockManager({ numBlocks: 64, blockSize: 4 }));
    for (const id of ['a', 'b', 'c', 'd']) s.add(req(id, 2));
    let out = s.schedule();
    expect(out.rows.map((r) => r.request.id)).toEqual(['a', 'b']);
    finishStep(s, out);
    s.remove(s.running[0]!); // a finishes
    out = s.schedule();
    expect(out.rows.map((r) => r.request.id)).toEqual(['b', 'c']);
  });

  it('refuses requests beyond the waiting queue bound', () => {
    const s = new Scheduler({ maxNumSeqs: 1, maxBatchedTokens: 8, maxWaiting: 2 }, new BlockManager({ numBlocks: 8, blockSize: 4 }));
    s.add(req('a', 2));
    s.add(req('b', 2));
    expect(() => s.add(req('c', 2))).toThrow(EngineUnavailableError);
  });

  it('queues the head of the line when KV is short instead of letting others overtake', () => {
    const s = new Scheduler({ maxNumSeqs: 8, maxBatchedTokens: 100, maxWaiting: 8 }, new BlockManager({ numBlocks: 4, blockSize: 4 }));
    s.add(req('a', 8)); // 2 blocks
    s.add(req('b', 12)); // 3 blocks: does not fit next to a
    s.add(req('c', 2)); // would fit, but must not overtake b
    const out = s.schedule();
    expect(out.rows.map((r) => r.request.id)).toEqual(['a']);
    expect(s.waiting.map((r) => r.id)).toEqual(['b', 'c']);
  });

  it('preempts the newest running request when a decode needs a block, and recomputes it later', () => {
    const bm = new BlockManager({ numBlocks: 4, blockSize: 4, enablePrefixCache: false });
    const s = new Scheduler({ maxNumSeqs: 8, maxBatchedTokens: 100, maxWaiting: 8 }, bm);
    s.add(req('a', 8));
    s.add(req('b', 8));
    let out = s.schedule();
    expect(out.rows.map((r) => r.request.id)).toEqual(['a', 'b']);
    finishStep(s, out); // both have 9 tokens now: each decode needs a third block, only 0 free
    out = s.schedule();
    expect(out.preempted.map((r) => r.id)).toEqual(['b']);
    expect(summary(out)).toEqual(['a:8+1*']);
    expect(s.waiting.map((r) => r.id)).toEqual(['b']);
    const b = s.waiting[0]!;
    expect(b.numComputed).toBe(0);
    expect(b.blockTable).toEqual([]);
    s.remove(s.running[0]!);
    out = s.schedule();
    // b recomputes prompt + its generated token, then samples its next one.
    expect(summary(out)).toEqual(['b:0+9*']);
  });

  it('fails a request that cannot fit even alone', () => {
    const s = new Scheduler({ maxNumSeqs: 8, maxBatchedTokens: 100, maxWaiting: 8 }, new BlockManager({ numBlocks: 2, blockSize: 4 }));
    const a = req('a', 8);
    s.add(a);
    let out = s.schedule();
    finishStep(s, out); // 9 tokens need 3 blocks > 2
    out = s.schedule();
    expect(out.failed.map((f) => f.request.id)).toEqual(['a']);
    expect(out.failed[0]!.error.code).toBe('kv_cache_full');
    expect(s.hasWork).toBe(false);
  });
});
