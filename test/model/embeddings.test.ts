// Pooling through the step contract (wantHidden): the last token's hidden state after the final norm,
// L2-normalised, equals transformers' last-token pooling (scripts/fixtures/embedding.py) on the tiny
// Qwen3-Embedding fixture (a bare Qwen3Model) and on the qwen3-f32 causal LM; it does not depend on
// the batch (neighbours, prefill chunks); an embedding model refuses rows that sample.
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateCheckpoint } from '../../src/models/validate-checkpoint.js';
import type { NativeModel, NativeStepRow } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { cosine, EMBEDDING_REF as REF, FIXTURES as FIX, normalize } from '../helpers/embeddings.js';
import { BlockAllocator, GREEDY } from '../helpers/runner.js';

/** One row that prefills `ids` from `ctx` and, on its last chunk, returns the hidden state. */
function row(id: string, ids: number[], from: number, to: number, table: number[], last: boolean): NativeStepRow {
  const tokens = ids.slice(from, to);
  return {
    requestId: id,
    tokens: Int32Array.from(tokens),
    positions: Int32Array.from(tokens, (_, i) => from + i),
    blockTable: Int32Array.from(table),
    contextLen: from,
    ...(last ? { wantHidden: true } : {}),
  };
}

/** Hidden states of each prompt, all in the same steps, prefilled in chunks of `chunk` tokens. */
async function pooled(model: NativeModel, prompts: number[][], chunk = Infinity): Promise<Float32Array[]> {
  const info = model.info();
  const alloc = new BlockAllocator(info.blockSize, info.numBlocks);
  const tables = prompts.map(() => [] as number[]);
  const done = new Map<number, Float32Array>();
  const at = prompts.map(() => 0);
  while (done.size < prompts.length) {
    const rows: NativeStepRow[] = [];
    prompts.forEach((p, i) => {
      if (done.has(i)) return;
      const to = Math.min(p.length, at[i]! + chunk);
      alloc.grow(tables[i]!, to);
      rows.push(row(`r${i}`, p, at[i]!, to, tables[i]!, to === p.length));
      at[i] = to;
    });
    const res = await model.step({ rows });
    for (const r of res.rows) {
      expect(r.error).toBeUndefined();
      expect(r.token).toBeUndefined();
      const i = Number(r.requestId.slice(1));
      if (r.hidden !== undefined) done.set(i, r.hidden);
    }
  }
  return prompts.map((_, i) => done.get(i)!);
}

describe.each(['qwen3-embedding-f32', 'qwen3-f32'])('%s pooled hidden states', (name) => {
  const ref = REF.models[name]!;
  for (const precision of ['exact', 'fast'] as const) {
    describe(precision, () => {
      let model: NativeModel;
      let solo: Float32Array[];
      beforeAll(async () => {
        model = addon().loadModel(join(FIX, 'models', name), { threads: 2, kvCacheBytes: 8 << 20, precision });
        solo = [];
        for (const ids of ref.ids) solo.push((await pooled(model, [ids]))[0]!);
      });
      afterAll(() => model.close());

      it('equals transformers last-token pooling + L2 normalisation', () => {
        expect(model.info().embeddingOnly === true).toBe(name === 'qwen3-embedding-f32');
        ref.ids.forEach((_, i) => {
          const got = normalize(solo[i]!);
          const want = ref.embeddings[i]!;
          expect(got).toHaveLength(model.info().hiddenSize);
          expect(cosine(got, want)).toBeGreaterThan(0.9999);
          // fast: int8 activations and an f16 KV cache (the CPU default) move single elements up to ~2e-4.
          expect(Math.max(...got.map((x, j) => Math.abs(x - want[j]!)))).toBeLessThan(precision === 'exact' ? 2e-4 : 5e-4);
        });
      });

      it('does not depend on the batch: all texts together equal each alone, bit for bit', async () => {
        const together = await pooled(model, ref.ids);
        ref.ids.forEach((_, i) => expect([...together[i]!]).toEqual([...solo[i]!]));
      });

      // Chunking changes the order of the attention's sums over keys (KV read back vs in-chunk), as it does
      // for logits: float rounding only, far below what any similarity search can see.
      it('prefill chunks of 5 tokens give the same embedding up to float rounding', async () => {
        const chunked = await pooled(model, ref.ids, 5);
        ref.ids.forEach((_, i) => {
          const a = normalize(chunked[i]!), b = normalize(solo[i]!);
          expect(cosine(a, b)).toBeGreaterThan(1 - 1e-9);
          expect(Math.max(...a.map((x, j) => Math.abs(x - b[j]!)))).toBeLessThan(1e-5);
        });
      });

      it('one pooled row next to a decoding row leaves both as they are alone', async () => {
        if (name === 'qwen3-embedding-f32') return; // it cannot sample
        const info = model.info();
        const alloc = new BlockAllocator(info.blockSize, info.numBlocks);
        const a = ref.ids[0]!, b = ref.ids[1]!;
        const ta: number[] = [], tb: number[] = [];
        alloc.grow(ta, a.length);
        alloc.grow(tb, b.length);
        const soloStep = await model.step({ rows: [{ ...row('s', a, 0, a.length, ta, false), sample: GREEDY }] });
        const ta2: number[] = [];
        alloc.grow(ta2, a.length);
        const mixed = await model.step({ rows: [{ ...row('s', a, 0, a.length, ta2, false), sample: GREEDY }, row('p', b, 0, b.length, tb, true)] });
        expect(mixed.rows[0]!.token).toBe(soloStep.rows[0]!.token);
        expect([...mixed.rows[1]!.hidden!]).toEqual([...solo[1]!]);
      });
    });
  }
});

describe('qwen3-embedding-f32 refuses what an embedding model cannot do', () => {
  let model: NativeModel;
  beforeAll(() => {
    model = addon().loadModel(join(FIX, 'models', 'qwen3-embedding-f32'), { threads: 2, kvCacheBytes: 8 << 20 });
  });
  afterAll(() => model.close());

  it('a sampling row fails alone, naming the model as an embedding model', async () => {
    const ids = REF.models['qwen3-embedding-f32']!.ids[0]!;
    const res = await model.step({
      rows: [
        { ...row('s', ids, 0, ids.length, [0, 1], false), sample: GREEDY },
        row('p', ids, 0, ids.length, [2, 3], true),
      ],
    });
    expect(res.rows[0]!.error).toMatch(/embedding model/);
    expect(res.rows[1]!.error).toBeUndefined();
    expect(res.rows[1]!.hidden).toHaveLength(128);
  });

  it('wantHidden with sample is a row error', async () => {
    const ids = [1, 2, 3];
    const res = await model.step({ rows: [{ ...row('x', ids, 0, 3, [0], true), sample: GREEDY }] });
    expect(res.rows[0]!.error).toMatch(/wantHidden/);
  });
});

// Qwen/Qwen3-Embedding-* publish Qwen3Model's weights (no "model." prefix, no lm_head) under a config whose
// architectures say Qwen3ForCausalLM: the bare decoder is what makes it an embedding model.
describe('a bare Qwen3 decoder under a Qwen3ForCausalLM config (as Qwen3-Embedding ships)', () => {
  let dir = '';
  let model: NativeModel;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'rapid-q3emb-'));
    const src = join(FIX, 'models', 'qwen3-embedding-f32');
    for (const f of readdirSync(src)) copyFileSync(join(src, f), join(dir, f));
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, architectures: ['Qwen3ForCausalLM'] }));
    model = addon().loadModel(dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
  });
  afterAll(() => {
    model?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('passes the checkpoint check and loads as an embedding model with the same embeddings', async () => {
    expect(() => validateCheckpoint(dir)).not.toThrow();
    expect(model.info().embeddingOnly).toBe(true);
    const ref = REF.models['qwen3-embedding-f32']!;
    const got = normalize((await pooled(model, [ref.ids[0]!]))[0]!);
    expect(cosine(got, ref.embeddings[0]!)).toBeGreaterThan(0.9999);
  });
});
