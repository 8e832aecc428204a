// VLM fixtures (test/fixtures/vlm/<family>-<variant>/, written by scripts/fixtures/vision) and a
// miniature scheduler for image rows: explicit (m)RoPE positions, image embeddings spliced at their
// placeholder offsets, Gemma 3 bidirectional image blocks, decode positions = index + rope delta.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { expect } from 'vitest';
import type { NativeModel, NativeStepRow } from '../../src/native/types.js';
import { maxAbsDiff } from './fixtures.js';
import { BlockAllocator, GREEDY } from './runner.js';

/** Fixture root; RAPID_VLM_FIXTURES points elsewhere for a locally generated set. */
export const VLM_ROOT = process.env.RAPID_VLM_FIXTURES ?? resolve(import.meta.dirname, '..', 'fixtures', 'vlm');

export interface VlmImageRef {
  file?: string;
  grid: [number, number, number];
  pixel_values: string; // .f32 file
  features: string; // .f32 file [tokens, hidden]
  deepstack?: string; // .f32 file [layers, tokens, hidden] (Qwen3-VL)
  placeholder_offset: number;
  tokens: number;
}

export interface VlmCase {
  name: string;
  input_ids: number[];
  images: VlmImageRef[];
  position_ids?: number[][]; // [3][n] (mRoPE)
  rope_delta?: number;
  logits: string; // .f32 file [n_last, vocab]
  n_last: number;
  greedy: number[];
}

export interface VlmFixture {
  name: string;
  dir: string;
  family: string;
  cases: VlmCase[];
}

export function vlmFixtureNames(): string[] {
  if (!existsSync(VLM_ROOT)) return [];
  return readdirSync(VLM_ROOT)
    .filter((d) => existsSync(join(VLM_ROOT, d, 'reference.json')))
    .sort();
}

export function loadVlmFixture(name: string): VlmFixture {
  const dir = join(VLM_ROOT, name);
  const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { family: string; cases: VlmCase[] };
  return { name, dir, family: ref.family, cases: ref.cases };
}

export function readF32(dir: string, file: string): Float32Array {
  const buf = readFileSync(join(dir, file));
  return new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
}

/** One image of a sequence: its placeholder span and what fills it. */
export interface SeqImage {
  offset: number;
  tokens: number;
  data: Float32Array; // [tokens, hidden]
  deepstack?: Float32Array; // [layers, tokens, hidden]
  span?: number; // Pixtral: span length incl. [IMG_BREAK]/[IMG_END] (default tokens)
  at?: number[]; // Pixtral: offsets inside the span of the rows' tokens (default 0..tokens-1)
}

export interface VlmSeqSpec {
  id: string;
  prompt: number[];
  positions?: number[][]; // [3][n] for mRoPE models; absent: 0..n-1
  delta?: number; // rope delta for decode positions (mRoPE)
  images: SeqImage[];
  bidirectional?: boolean; // Gemma 3: image spans attend to each other both ways in prefill
  maxTokens: number;
  chunks?: number[]; // prefill chunk lengths (must not split an image); default one chunk
  startStep?: number;
  wantLogits?: boolean; // raw logits of the last prefill chunk
}

export interface VlmSeqOut {
  tokens: number[];
  logits?: Float32Array; // [n_last_chunk, vocab]
  errors: string[];
}

/** Slices the images falling inside [s, e) into a row's embeds (offsets relative to s). */
function embedsFor(images: SeqImage[], s: number, e: number, hidden: number): NativeStepRow['embeds'] {
  const end = (im: SeqImage) => im.offset + (im.span ?? im.tokens);
  const inside = images.filter((im) => im.offset >= s && end(im) <= e);
  for (const im of images)
    if (im.offset < e && end(im) > s && !inside.includes(im)) throw new Error('chunk splits an image');
  if (inside.length === 0) return undefined;
  const m = inside.reduce((a, im) => a + im.tokens, 0);
  const offsets = new Int32Array(m);
  const data = new Float32Array(m * hidden);
  const layers = inside[0]!.deepstack ? inside[0]!.deepstack.length / (inside[0]!.tokens * hidden) : 0;
  const deepstack = layers ? new Float32Array(layers * m * hidden) : undefined;
  let k = 0;
  for (const im of inside) {
    for (let i = 0; i < im.tokens; i++) offsets[k + i] = im.offset - s + (im.at ? im.at[i]! : i);
    data.set(im.data, k * hidden);
    for (let l = 0; l < layers; l++)
      deepstack!.set(im.deepstack!.subarray(l * im.tokens * hidden, (l + 1) * im.tokens * hidden), (l * m + k) * hidden);
    k += im.tokens;
  }
  return deepstack ? { offsets, data, deepstack } : { offsets, data };
}

export async function runVlmSequences(model: NativeModel, specs: VlmSeqSpec[], alloc?: BlockAllocator): Promise<Map<string, VlmSeqOut>> {
  const info = model.info();
  const axes = info.mropeSections ? 3 : 1;
  const blocks = alloc ?? new BlockAllocator(info.blockSize, info.numBlocks);
  interface St { spec: VlmSeqSpec; ctx: number; chunk: number; table: number[]; out: VlmSeqOut; done: boolean }
  const st: St[] = specs.map((spec) => ({ spec, ctx: 0, chunk: 0, table: [], out: { tokens: [], errors: [] }, done: false }));
  for (let step = 0; st.some((s) => !s.done); step++) {
    if (step > 10_000) throw new Error('runaway test loop');
    const rows: NativeStepRow[] = [];
    const byId = new Map<string, St>();
    for (const s of st) {
      if (s.done || (s.spec.startStep ?? 0) > step) continue;
      const n = s.spec.prompt.length;
      let row: NativeStepRow;
      if (s.ctx < n) {
        const len = s.spec.chunks?.[s.chunk] ?? n - s.ctx;
        const e = Math.min(n, s.ctx + len);
        const toks = s.spec.prompt.slice(s.ctx, e);
        const positions = new Int32Array(axes * toks.length);
        for (let a = 0; a < axes; a++)
          for (let i = 0; i < toks.length; i++) positions[a * toks.length + i] = s.spec.positions ? s.spec.positions[a]![s.ctx + i]! : s.ctx + i;
        blocks.grow(s.table, e);
        row = { requestId: s.spec.id, tokens: Int32Array.from(toks), positions, blockTable: Int32Array.from(s.table), contextLen: s.ctx };
        const embeds = embedsFor(s.spec.images, s.ctx, e, info.hiddenSize);
        if (embeds) row.embeds = embeds;
        if (s.spec.bidirectional) {
          const pairs = s.spec.images.filter((im) => im.offset >= s.ctx && im.offset + im.tokens <= e).flatMap((im) => [im.offset - s.ctx, im.offset + im.tokens - s.ctx]);
          if (pairs.length) row.bidirectional = Int32Array.from(pairs);
        }
        if (e === n) {
          row.sample = { ...GREEDY, counter: 0 };
          if (s.spec.wantLogits) row.wantLogits = true;
        }
      } else {
        // Decode: the last sampled token at sequence index ctx; mRoPE positions = index + delta on every axis.
        const pos = s.ctx + (s.spec.delta ?? 0);
        blocks.grow(s.table, s.ctx + 1);
        row = {
          requestId: s.spec.id,
          tokens: Int32Array.of(s.out.tokens[s.out.tokens.length - 1]!),
          positions: new Int32Array(axes).fill(pos),
          blockTable: Int32Array.from(s.table),
          contextLen: s.ctx,
          sample: { ...GREEDY, counter: s.out.tokens.length },
        };
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
      if (s.ctx <= s.spec.prompt.length) s.chunk++;
      if (row.wantLogits && r.logits) s.out.logits = r.logits;
      if (r.token !== undefined) {
        s.out.tokens.push(r.token);
        if (s.out.tokens.length >= s.spec.maxTokens) s.done = true;
      }
    }
  }
  return new Map(st.map((s) => [s.spec.id, s.out]));
}

export const maxAbs = (a: Float32Array): number => a.reduce((m, x) => Math.max(m, Math.abs(x)), 0);

/** Expects max |got - want| <= tol * max(1, max|want|); returns that relative difference for the summaries. */
export function expectWithin(got: Float32Array, want: Float32Array, tol: number, label: string): number {
  const scale = Math.max(1, maxAbs(want));
  const d = maxAbsDiff(got, want);
  expect(d, label).toBeLessThanOrEqual(tol * scale);
  return d / scale;
}

/** The rows at `positions` of logits [n, vocab], gathered into [positions.length, vocab]. */
export function logitsAt(logits: Float32Array, positions: number[], vocab: number): Float32Array {
  const got = new Float32Array(positions.length * vocab);
  positions.forEach((p, i) => got.set(logits.subarray(p * vocab, (p + 1) * vocab), i * vocab));
  return got;
}

/** The stored features (and DeepStack rows) of a case's images, as the step splices them. */
export function storedImages(dir: string, c: { images: { placeholder_offset: number; tokens: number; features: string; deepstack?: string }[] }): SeqImage[] {
  return c.images.map((im) => ({
    offset: im.placeholder_offset,
    tokens: im.tokens,
    data: readF32(dir, im.features),
    deepstack: im.deepstack ? readF32(dir, im.deepstack) : undefined,
  }));
}

/** Prefill chunk lengths of an n-token prompt cut at every offset in `cuts`. */
export function chunksAt(cuts: number[], n: number): number[] {
  const bounds = [...new Set([0, ...cuts, n])].sort((a, b) => a - b);
  return bounds.slice(1).map((b, k) => b - bounds[k]!).filter((x) => x > 0);
}

/** Chunks cut at the case's image boundaries, so no chunk splits an image. */
export function imageChunks(c: { images: { placeholder_offset: number; tokens: number }[]; input_ids: number[] }): number[] {
  return chunksAt(c.images.flatMap((im) => [im.placeholder_offset, im.placeholder_offset + im.tokens]), c.input_ids.length);
}

/**
 * Batch invariance of `cases` on m: each case's greedy tokens alone (equal to the reference when `exact`),
 * all cases in one step, and joined mid-stream (case i from step firstStep + 2i, prefilled in `chunks(c)`)
 * are the same.
 */
export async function expectBatchInvariant<C extends { name: string; greedy: number[] }>(
  m: NativeModel,
  cases: C[],
  spec: (c: C, extra?: Partial<VlmSeqSpec>) => VlmSeqSpec,
  chunks: (c: C) => number[],
  exact: boolean,
  firstStep = 0,
): Promise<void> {
  const solo = new Map<string, number[]>();
  for (const c of cases) solo.set(c.name, (await runVlmSequences(m, [spec(c)])).get(c.name)!.tokens);
  if (exact) for (const c of cases) expect(solo.get(c.name), c.name).toEqual(c.greedy);
  const together = await runVlmSequences(m, cases.map((c) => spec(c)));
  for (const c of cases) expect(together.get(c.name)!.tokens, `${c.name} together`).toEqual(solo.get(c.name));
  const alloc = new BlockAllocator(m.info().blockSize, m.info().numBlocks);
  const staggered = await runVlmSequences(m, cases.map((c, i) => spec(c, { startStep: firstStep + 2 * i, chunks: chunks(c) })), alloc);
  for (const c of cases) expect(staggered.get(c.name)!.tokens, `${c.name} joined mid-stream`).toEqual(solo.get(c.name));
}

/** The fixture's text-only case on m: its reference logits rows within 1e-4 * max(1, max|logit|) and 16 greedy tokens. */
export async function expectTextCase(m: NativeModel, fx: Pick<VlmFixture, 'dir' | 'cases'>): Promise<void> {
  const c = fx.cases.find((x) => x.images.length === 0)!;
  const out = (await runVlmSequences(m, [{ id: 't', prompt: c.input_ids, images: [], maxTokens: 16, wantLogits: true }])).get('t')!;
  const ref = readF32(fx.dir, c.logits);
  expect(maxAbsDiff(out.logits!.subarray(out.logits!.length - ref.length), ref)).toBeLessThanOrEqual(1e-4 * Math.max(1, maxAbs(ref)));
  expect(out.tokens).toEqual(c.greedy);
}
