// The single-sequence generation loop against a scripted native model: chunked prefill, stop
// tokens, stop strings across deltas, max_tokens, context limit, step errors, KV release.
import { describe, expect, it } from 'vitest';
import { generate, type GenerateEvent, type StopFilter, type TextStream } from '../../src/engine/generate.js';
import { KvBlockAllocator } from '../../src/engine/kv-blocks.js';
import { resolveSamplingParams } from '../../src/engine/sampling-params.js';
import { InvalidRequestError, StepError } from '../../src/engine/errors.js';
import { StopMatcher } from '../../src/engine/stop-matcher.js';
import type { NativeModel, NativeStepPlan, NativeStepResult } from '../../src/native/types.js';

/** Emits `script` tokens in order; records every plan it was given. */
function scriptedModel(script: number[], failAt = -1): NativeModel & { plans: NativeStepPlan[] } {
  const plans: NativeStepPlan[] = [];
  let emitted = 0;
  return {
    plans,
    info: () => {
      throw new Error('unused');
    },
    close: () => undefined,
    step: async (plan: NativeStepPlan): Promise<NativeStepResult> => {
      plans.push(plan);
      const rows = plan.rows.map((r) => {
        if (plans.length - 1 === failAt) return { requestId: r.requestId, error: 'forward failed: injected' };
        return r.sample ? { requestId: r.requestId, token: script[emitted++], logprob: -0.5 } : { requestId: r.requestId };
      });
      return { rows, timings: { forwardMs: 0, sampleMs: 0, tokens: 0 } };
    },
  };
}

// Token t decodes to String.fromCharCode(96 + t): 1 -> "a", 2 -> "b", ...
const letters = (): TextStream => ({ push: (t) => String.fromCharCode(96 + t), flush: () => '' });
const stopOn = (stop: string): StopFilter => new StopMatcher({ stopStrings: [stop] });
const noStop = (): StopFilter => new StopMatcher();

async function collect(it: AsyncGenerator<GenerateEvent>): Promise<GenerateEvent[]> {
  const out: GenerateEvent[] = [];
  for await (const e of it) out.push(e);
  return out;
}

function setup(script: number[], o: { maxTokens?: number; ctx?: number; stop?: StopFilter; failAt?: number; prompt?: number[] } = {}) {
  const model = scriptedModel(script, o.failAt);
  const blocks = new KvBlockAllocator(64, 4);
  const params = resolveSamplingParams({ temperature: 0, maxTokens: o.maxTokens ?? 8, seed: 3 }, { maxTokens: 8 });
  const events = collect(
    generate({
      model,
      blocks,
      contextLength: o.ctx ?? 1000,
      promptIds: o.prompt ?? [5, 6, 7, 8, 9, 10, 11],
      params,
      stopTokenIds: new Set([26]),
      text: letters(),
      stops: o.stop ?? noStop(),
      prefillChunk: 3,
    }),
  );
  return { model, blocks, events };
}

describe('generate', () => {
  it('prefills in chunks with explicit positions, samples only on the last chunk, then decodes', async () => {
    const { model, blocks, events } = setup([1, 2, 3], { maxTokens: 3 });
    const ev = await events;
    const done = ev.at(-1);
    expect(done).toMatchObject({ type: 'done', text: 'abc', finishReason: 'length', tokenIds: [1, 2, 3] });
    const rows = model.plans.map((p) => p.rows[0]);
    expect(rows.map((r) => Array.from(r.tokens))).toEqual([[5, 6, 7], [8, 9, 10], [11], [1], [2]]);
    expect(rows.map((r) => r.contextLen)).toEqual([0, 3, 6, 7, 8]);
    expect(Array.from(rows[1].positions)).toEqual([3, 4, 5]);
    expect(rows.map((r) => r.sample !== undefined)).toEqual([false, false, true, true, true]);
    expect(rows.map((r) => r.sample?.counter)).toEqual([undefined, undefined, 0, 1, 2]);
    expect(new Set(rows.map((r) => r.requestId)).size).toBe(1);
    expect(rows[4].blockTable.length).toBe(3); // 9 slots in blocks of 4
    expect(blocks.freeBlocks).toBe(64);
  });

  it('ends on a stop token without emitting it', async () => {
    const ev = await setup([1, 2, 26, 3]).events;
    expect(ev.at(-1)).toMatchObject({ text: 'ab', finishReason: 'stop', tokenIds: [1, 2, 26] });
  });

  it('ends on a stop string that spans tokens and never emits any of it', async () => {
    const ev = await setup([1, 2, 3, 4, 5], { stop: stopOn('cd') }).events;
    const deltas = ev.filter((e) => e.type === 'delta').map((e) => (e as { text: string }).text).join('');
    expect(deltas).toBe('ab');
    expect(ev.at(-1)).toMatchObject({ text: 'ab', finishReason: 'stop' });
  });

  it('stops at the context limit with finish_reason length', async () => {
    const ev = await setup([1, 2, 3, 4, 5, 6], { ctx: 10, maxTokens: 100 }).events;
    expect(ev.at(-1)).toMatchObject({ finishReason: 'length', tokenIds: [1, 2, 3] });
  });

  it('rejects a prompt that fills the context before any step', async () => {
    const { model, events } = setup([1], { ctx: 7 });
    await expect(events).rejects.toThrow(InvalidRequestError);
    await expect(events).rejects.toThrow(/prompt is 7 tokens; this model's context is 7 tokens/);
    expect(model.plans).toHaveLength(0);
  });

  it('turns a row error into a StepError and frees the blocks', async () => {
    const { blocks, events } = setup([1, 2, 3], { failAt: 3 });
    await expect(events).rejects.toThrow(StepError);
    await expect(events).rejects.toThrow(/injected/);
    expect(blocks.freeBlocks).toBe(64);
  });

  it('fails clearly when the KV pool is too small', async () => {
    const model = scriptedModel([1, 2, 3]);
    const blocks = new KvBlockAllocator(1, 4);
    const params = resolveSamplingParams({ temperature: 0, maxTokens: 4 }, { maxTokens: 4 });
    const run = collect(
      generate({ model, blocks, contextLength: 100, promptIds: [1, 2, 3, 4, 5], params, stopTokenIds: new Set(), text: letters(), stops: noStop() }),
    );
    await expect(run).rejects.toThrow(/KV cache is full/);
    expect(blocks.freeBlocks).toBe(1);
  });
});

describe('sampling params', () => {
  it('fills defaults and keeps a given seed', () => {
    const p = resolveSamplingParams({ seed: 42 }, { maxTokens: 16 });
    expect(p).toMatchObject({ temperature: 1, topP: 1, topK: 0, minP: 0, seed: 42, maxTokens: 16, stop: [], logprobs: -1 });
  });

  it.each([
    [{ temperature: -1 }, /temperature/],
    [{ topP: 0 }, /top_p: must be in \(0, 1\]/],
    [{ topK: 1.5 }, /top_k/],
    [{ minP: 2 }, /min_p/],
    [{ seed: -3 }, /seed/],
    [{ maxTokens: 0 }, /max_tokens/],
    [{ stop: [''] }, /stop strings must be non-empty/],
    [{ presencePenalty: 3 }, /presence_penalty/],
    // What the native side cannot represent is refused here, with the range and the value given.
    [{ topK: 1e10 }, /top_k: must be an integer in \[-1, 2147483647\].*got 10000000000/],
    [{ topK: -2 }, /top_k/],
    [{ seed: 2 ** 53 }, /seed: must be an integer in \[0, 9007199254740991\]/],
    [{ temperature: 1e308 }, /temperature: must be a number in \[0, 100\]/],
    [{ repetitionPenalty: 1e-300 }, /repetition_penalty: must be a number in \[0.01, 10\]/],
    [{ frequencyPenalty: Number.NaN }, /frequency_penalty/],
    [{ logprobs: 21 }, /logprobs/],
    [{ stop: new Array(17).fill('x') }, /at most 16 stop strings, got 17/],
    [{ stop: ['x'.repeat(1025)] }, /at most 1024 characters, got one of 1025/],
  ])('rejects %o with a message naming the parameter', (input, msg) => {
    expect(() => resolveSamplingParams(input, { maxTokens: 16 })).toThrow(msg);
  });

  it('normalizes what has one meaning spelled several ways', () => {
    const r = (input: Parameters<typeof resolveSamplingParams>[0]) => resolveSamplingParams({ seed: 1, ...input }, { maxTokens: 16 });
    expect(r({ topK: -1 }).topK).toBe(0); // vLLM: -1 is off
    expect(r({ topK: 2 ** 31 - 1 }).topK).toBe(2 ** 31 - 1); // at or above the vocabulary: off natively
    expect(r({ temperature: 1e-9 }).temperature).toBe(0); // greedy, as vLLM
    expect(r({ topP: 1e-300 }).topP).toBe(1e-8); // keeps the top token, as any tiny top_p
    expect(Object.is(r({ seed: -0 }).seed, 0)).toBe(true);
  });
});

describe('KV block allocator', () => {
  it('grows tables block by block and refuses without partial allocation when short', () => {
    const a = new KvBlockAllocator(3, 4);
    const t: number[] = [];
    expect(a.ensure(t, 5)).toBe(true);
    expect(t).toEqual([0, 1]);
    const u: number[] = [];
    expect(a.ensure(u, 8)).toBe(false);
    expect(u).toEqual([]);
    a.release(t);
    expect(a.freeBlocks).toBe(3);
  });
});
