// The scheduler as plain data: token budget with chunked prefill, decodes first, max running
// sequences, FCFS with a bounded queue, preemption of the newest request when KV runs out.
import { describe, expect, it } from 'vitest';
import { BlockManager } from '../../src/engine/block-manager.js';
import { EngineUnavailableError } from '../../src/errors/request-errors.js';
import { EngineRequest } from '../../src/engine/request.js';
import { Scheduler, type SchedulerOutput } from '../../src/engine/scheduler.js';
import type { ImageSpan } from '../../src/engine/multimodal.js';
import { byteTextStream, params } from './helpers.js';

function req(id: string, len: number, maxTokens = 100, imageSpans?: ImageSpan[]): EngineRequest {
  return new EngineRequest({
    ...(imageSpans !== undefined ? { imageSpans } : {}),
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
    // Three contenders: a share of 2 each first, then what is left in arrival order.
    expect(summary(out)).toEqual(['a:0+3*', 'b:0+3', 'c:0+2']);
    finishStep(s, out);
    out = s.schedule();
    // a decodes first; b and c share the other 7 (3 each), b takes the last 2.
    expect(summary(out)).toEqual(['a:3+1*', 'b:3+5', 'c:2+2*']);
    finishStep(s, out);
    out = s.schedule();
    expect(summary(out)).toEqual(['a:4+1*', 'c:4+1*', 'b:8+2*']);
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

  describe('prefill fairness', () => {
    /** Runs steps until `done` holds; returns the steps taken. */
    function stepUntil(s: Scheduler, done: () => boolean, max = 1000): SchedulerOutput[] {
      const outs: SchedulerOutput[] = [];
      while (!done() && outs.length < max) {
        const out = s.schedule();
        outs.push(out);
        finishStep(s, out);
      }
      return outs;
    }

    it('gives a lone long prompt the whole budget', () => {
      const s = new Scheduler({ maxNumSeqs: 8, maxBatchedTokens: 64, maxWaiting: 8 }, new BlockManager({ numBlocks: 256, blockSize: 16 }));
      s.add(req('L', 1000));
      for (let i = 0; i < 3; i++) {
        const out = s.schedule();
        expect(summary(out)).toEqual([`L:${64 * i}+64`]);
        finishStep(s, out);
      }
    });

    it('prefills short requests that arrive during a long prefill in the next step', () => {
      const s = new Scheduler({ maxNumSeqs: 8, maxBatchedTokens: 64, maxWaiting: 8 }, new BlockManager({ numBlocks: 256, blockSize: 16 }));
      s.add(req('L', 1000));
      finishStep(s, s.schedule());
      const shorts = ['a', 'b', 'c', 'd', 'e'].map((id) => req(id, 10));
      for (const r of shorts) s.add(r);
      const out = s.schedule();
      // A share of 64/6 = 10 each: every short prompt whole (and sampled), the long one the rest.
      expect(summary(out)).toEqual(['L:64+14', 'a:0+10*', 'b:0+10*', 'c:0+10*', 'd:0+10*', 'e:0+10*']);
      expect(out.numTokens).toBe(64);
    });

    it('bounds the first token of short requests and keeps running decodes going while a long prompt prefills', () => {
      const s = new Scheduler({ maxNumSeqs: 16, maxBatchedTokens: 32, maxWaiting: 16 }, new BlockManager({ numBlocks: 1024, blockSize: 16 }));
      const running = [req('r1', 4), req('r2', 4)];
      for (const r of running) s.add(r);
      stepUntil(s, () => running.every((r) => r.numComputed === r.tokens.length && r.tokens.length > 4));
      const long = req('L', 4000);
      s.add(long);
      finishStep(s, s.schedule());
      const shorts = Array.from({ length: 5 }, (_, i) => req(`s${i}`, 20 + i, 1));
      for (const r of shorts) s.add(r);
      let steps = 0;
      let decodeGaps = 0;
      while (shorts.some((r) => r.tokens.length === r.promptIds.length)) {
        const out = s.schedule();
        for (const r of running) if (!out.rows.some((row) => row.request === r && row.sample)) decodeGaps++;
        finishStep(s, out);
        steps++;
      }
      // Before: the shorts waited for all 4000 tokens (125 steps of 32). Now: about one share each.
      expect(steps).toBeLessThanOrEqual(6);
      expect(decodeGaps).toBe(0);
      expect(long.numComputed).toBeLessThan(long.tokens.length);
    });

    it('caps a prefill chunk by its attention work while others decode, never when alone', () => {
      // Budget 64, cap 64 x 256 = 16384 query-key pairs: a full chunk up to context 192, deeper ever smaller ones.
      const cfg = { maxNumSeqs: 8, maxBatchedTokens: 64, maxWaiting: 8, maxPrefillAttention: 16_384 };
      const alone = new Scheduler(cfg, new BlockManager({ numBlocks: 512, blockSize: 16 }));
      alone.add(req('L', 2000));
      const lone = stepUntil(alone, () => (alone.running[0]?.numComputed ?? 0) >= 2000);
      expect(lone.length).toBe(Math.ceil(2000 / 64));
      expect(lone.every((o) => o.numTokens === 64 || o === lone.at(-1))).toBe(true); // nobody decodes: no cap

      const s = new Scheduler(cfg, new BlockManager({ numBlocks: 512, blockSize: 16 }));
      const d = req('d', 4, 1000);
      s.add(d);
      stepUntil(s, () => d.tokens.length > 5);
      const long = req('L', 2000);
      s.add(long);
      let worst = 0;
      const outs = stepUntil(s, () => long.numComputed >= long.promptIds.length);
      for (const out of outs) {
        expect(out.rows.some((r) => r.request === d && r.sample)).toBe(true); // the decode runs every step
        const row = out.rows.find((r) => r.request === long);
        if (row === undefined) continue;
        const work = row.numTokens * (row.contextLen + row.numTokens);
        if (row.numTokens > 1) expect(work).toBeLessThanOrEqual(16_384);
        worst = Math.max(worst, work);
      }
      expect(worst).toBeLessThanOrEqual(16_384);
      expect(outs.length).toBeLessThan(200); // about 2000 / 16 steps at the end: it always advances
      expect(long.numComputed).toBeGreaterThanOrEqual(2000);

      // 0 turns the cap off: full chunks beside the decode.
      const off = new Scheduler({ ...cfg, maxPrefillAttention: 0 }, new BlockManager({ numBlocks: 512, blockSize: 16 }));
      const d2 = req('d', 4, 1000);
      off.add(d2);
      stepUntil(off, () => d2.tokens.length > 5);
      off.add(req('L', 2000));
      finishStep(off, off.schedule());
      expect(summary(off.schedule())).toEqual([`d:${d2.tokens.length - 1}+1*`, 'L:63+63']);
    });

    it('shares the budget between two long prompts', () => {
      const s = new Scheduler({ maxNumSeqs: 8, maxBatchedTokens: 64, maxWaiting: 8 }, new BlockManager({ numBlocks: 256, blockSize: 16 }));
      s.add(req('A', 1000));
      s.add(req('B', 1000));
      let out = s.schedule();
      expect(summary(out)).toEqual(['A:0+32', 'B:0+32']);
      finishStep(s, out);
      out = s.schedule();
      expect(summary(out)).toEqual(['A:32+32', 'B:32+32']);
    });

    it('never splits an image span when the budget is shared', () => {
      const s = new Scheduler({ maxNumSeqs: 8, maxBatchedTokens: 64, maxWaiting: 8 }, new BlockManager({ numBlocks: 256, blockSize: 16 }));
      const span = { start: 20, end: 60, key: 'img', image: {} } as unknown as ImageSpan;
      const img = req('I', 200, 100, [span]);
      s.add(req('L', 1000));
      s.add(img);
      s.add(req('x', 10));
      const outs = stepUntil(s, () => img.numComputed >= 100, 20);
      for (const out of outs) {
        for (const row of out.rows) {
          if (row.request !== img) continue;
          const a = row.contextLen;
          const b = row.contextLen + row.numTokens;
          // The chunk either holds the span whole or stays clear of it.
          expect(b <= span.start || a >= span.end || (a <= span.start && b >= span.end)).toBe(true);
        }
      }
      expect(img.numComputed).toBeGreaterThanOrEqual(100);
    });

    it('treats an image span larger than the share as atomic (the step is never empty)', () => {
      const s = new Scheduler({ maxNumSeqs: 8, maxBatchedTokens: 16, maxWaiting: 8 }, new BlockManager({ numBlocks: 256, blockSize: 4 }));
      const spanAt = (start: number) => [{ start, end: start + 12, key: 'img', image: {} } as unknown as ImageSpan];
      const a = req('a', 18, 100, spanAt(0));
      const b = req('b', 19, 100, spanAt(0));
      s.add(a);
      s.add(b);
      const out = s.schedule();
      expect(out.rows.length).toBeGreaterThan(0);
      expect(summary(out)).toEqual(['a:0+16']); // the span whole, then text up to the budget
    });
  });
});
