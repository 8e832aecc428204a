// A miniature scheduler for tests: drives NativeModel.step() for several sequences at once with
// explicit positions, block tables and sampling params, the way the engine will.
import type { NativeModel, NativeSampleParams, NativeStepRow } from '../../src/native/types.js';

export interface SeqSpec {
  id: string;
  prompt: number[];
  maxTokens: number;
  sample?: Partial<NativeSampleParams>; // default: greedy
  chunk?: number; // prefill chunk size (default: whole prompt)
  startStep?: number; // first step this sequence is scheduled in (default 0)
  logitRows?: number; // capture raw logits: row 0 at the prompt end, then after each of the first tokens
}

export interface SeqOut {
  tokens: number[];
  logits: Float32Array[]; // captured rows, [vocab] each
  logprobs: { token: number; logprob: number; top?: { token: number; logprob: number }[] }[];
  errors: string[];
}

import { GREEDY_SAMPLE as GREEDY } from '../../src/engine/sampling-params.js';

export { GREEDY };

/** Hands out KV blocks; every sequence gets its own, never reused within a run. */
export class BlockAllocator {
  private next = 0;
  constructor(
    readonly blockSize: number,
    readonly numBlocks: number,
  ) {}
  grow(table: number[], tokens: number): void {
    while (table.length * this.blockSize < tokens) {
      if (this.next >= this.numBlocks) throw new Error('test ran out of KV blocks');
      table.push(this.next++);
    }
  }
}

export async function runSequences(model: NativeModel, specs: SeqSpec[], alloc?: BlockAllocator): Promise<Map<string, SeqOut>> {
  const info = model.info();
  const blocks = alloc ?? new BlockAllocator(info.blockSize, info.numBlocks);
  const vocab = info.vocabSize;
  interface St {
    spec: SeqSpec;
    ctx: number; // tokens in KV
    table: number[];
    out: SeqOut;
    done: boolean;
  }
  const st: St[] = specs.map((spec) => ({ spec, ctx: 0, table: [], out: { tokens: [], logits: [], logprobs: [], errors: [] }, done: false }));
  for (let step = 0; st.some((s) => !s.done); step++) {
    if (step > 10_000) throw new Error('runaway test loop');
    const rows: NativeStepRow[] = [];
    const byId = new Map<string, St>();
    for (const s of st) {
      if (s.done || (s.spec.startStep ?? 0) > step) continue;
      const all = [...s.spec.prompt, ...s.out.tokens];
      const remaining = s.spec.prompt.length - s.ctx;
      let toks: number[];
      if (remaining > 0) toks = s.spec.prompt.slice(s.ctx, s.ctx + Math.min(remaining, s.spec.chunk ?? remaining));
      else toks = [all[all.length - 1]!];
      // Decode feeds the last sampled token, which is not yet in KV.
      const start = remaining > 0 ? s.ctx : all.length - 1;
      blocks.grow(s.table, start + toks.length);
      const finishesPrompt = start + toks.length >= s.spec.prompt.length;
      const captured = s.out.logits.length;
      const row: NativeStepRow = {
        requestId: s.spec.id,
        tokens: Int32Array.from(toks),
        positions: Int32Array.from(toks, (_, i) => start + i),
        blockTable: Int32Array.from(s.table),
        contextLen: start,
      };
      if (finishesPrompt) {
        const p = { ...GREEDY, ...s.spec.sample, counter: s.out.tokens.length };
        if (p.repetitionPenalty !== 1) p.promptTokens = Int32Array.from(s.spec.prompt);
        p.outputTokens = Int32Array.from(s.out.tokens);
        row.sample = p;
        if (captured < (s.spec.logitRows ?? 0)) row.wantLogits = true;
      }
      rows.push(row);
      byId.set(s.spec.id, s);
    }
    if (rows.length === 0) continue;
    const res = await model.step({ rows });
    for (const r of res.rows) {
      const s = byId.get(r.requestId)!;
      const row = rows.find((x) => x.requestId === r.requestId)!;
      if (r.error !== undefined) {
        s.out.errors.push(r.error);
        s.done = true;
        continue;
      }
      s.ctx = row.contextLen + row.tokens.length;
      if (row.wantLogits && r.logits) s.out.logits.push(r.logits.slice(r.logits.length - vocab));
      if (r.token !== undefined) {
        s.out.tokens.push(r.token);
        if (r.logprob !== undefined) s.out.logprobs.push({ token: r.token, logprob: r.logprob, top: r.topLogprobs });
        if (s.out.tokens.length >= s.spec.maxTokens) s.done = true;
      }
    }
  }
  return new Map(st.map((s) => [s.spec.id, s.out]));
}
