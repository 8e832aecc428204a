// Speculative greedy rows (the engine skips the grammar mask in wide states, asks the sampler for its
// ranked top candidates and lets the grammar take the best it allows) must be exact: the same
// tokens, text and finish reasons as the mask path, with misses redone under a mask, stop-only
// states ending with "stop", max_tokens accounting unchanged and a cancel during a redo freeing
// everything. Checked on the matcher alone, on the engine with a ranked fake model, and on the real
// qwen2-q4 fixture checkpoint.
import { describe, expect, it } from 'vitest';
import { Engine, type RequestHandle } from '../../src/engine/engine.js';
import { StreamingDetokenizer } from '../../src/engine/detokenizer.js';
import { grammarServiceFor } from '../../src/engine/grammar/grammar-service.js';
import type { GrammarNext, GrammarPick, RequestGrammar } from '../../src/engine/grammar/request-grammar.js';
import { parseResponseFormat, type ResponseFormat } from '../../src/server/response-format.js';
import { FakeModel } from '../helpers/fake-runner.js';
import { resolveSamplingParams, type SamplingParams } from '../../src/engine/sampling-params.js';
import { openTextModel } from '../../src/engine/text-model.js';
import type { NativeImageEmbedding, NativeLateMask, NativeModel, NativeModelInfo, NativeStepPlan, NativeStepResult, NativeStepRowResult } from '../../src/native/types.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { collect, type Collected } from '../engine/helpers.js';
import { SWEEP_SCHEMAS } from './sweep-schemas.js';
import { hashOf, mix } from '../helpers/context-hash.js';

const VOCAB = 1024;

/** Schemas with wide states (free strings), narrow ones, and outputs that may end or go on. */
const SCHEMAS: Record<string, unknown>[] = [
  ...SWEEP_SCHEMAS,
  {
    type: 'object',
    properties: { title: { type: 'string', minLength: 3, maxLength: 24 }, words: { type: 'array', items: { type: 'string', maxLength: 10 }, minItems: 2, maxItems: 5 } },
    required: ['title', 'words'],
    additionalProperties: false,
  },
  { type: 'object', properties: { note: { type: 'string' } }, required: ['note'], additionalProperties: false },
  { type: 'integer', minimum: 0 }, // "7" may end or go on: the stop token competes with digits
  { type: 'boolean' }, // ends in a state that allows only the stop token
];

function isSet(mask: Int32Array, t: number): boolean {
  return ((mask[t >> 5]! >>> (t & 31)) & 1) === 1;
}

/** Better first; ties go to the lower id (the native sampler's order). */
function ranking(scores: Float64Array): number[] {
  return Array.from(scores.keys()).sort((a, b) => scores[b]! - scores[a]! || a - b);
}

/**
 * A greedy model over a paged token "KV" (read back through the block table), whose logits are a
 * pure function of the context: coarse scores (many ties), whole-UTF-8 tokens above the rest, stop
 * tokens often on top. Masked rows take the best allowed token; rows asking logprobs k get the k
 * best unmasked candidates, ranked like the native sampler. Masks come late (two-phase) or in the plan.
 */
class RankedModel implements NativeModel {
  private readonly base = new FakeModel({ vocabSize: VOCAB, contextLength: 2048, numBlocks: 1024, blockSize: 4 });
  private readonly kv = new Int32Array(1024 * 4).fill(-1);
  readonly plans: NativeStepPlan[] = [];
  /** Replaces a speculative row's candidates (forced misses). */
  candidates: ((requestId: string, ranked: number[]) => number[]) | null = null;
  /** Stop tokens above everything else (wherever the grammar allows them, they win). */
  stopsFirst = false;
  onStep: (plan: NativeStepPlan) => void = () => undefined;
  supplyMasks?: (stepId: number, masks: NativeLateMask[]) => boolean;
  private gate: { stepId: number; supply: (m: NativeLateMask[]) => void } | null = null;

  constructor(
    private readonly clean: ReadonlySet<number>,
    private readonly stops: ReadonlySet<number>,
    late = true,
  ) {
    if (late) {
      this.supplyMasks = (stepId, masks) => {
        if (this.gate?.stepId !== stepId) return false;
        this.gate.supply(masks);
        this.gate = null;
        return true;
      };
    }
  }
  info(): NativeModelInfo {
    return this.base.info();
  }
  encodeImage(): Promise<NativeImageEmbedding> {
    return Promise.reject(new Error('no vision'));
  }
  close(): void {}

  scores(ctx: readonly number[]): Float64Array {
    const h = hashOf(ctx);
    const s = new Float64Array(VOCAB);
    const stopBonus = this.stopsFirst ? 1000 : 104;
    for (let t = 0; t < VOCAB; t++) s[t] = (mix(h, t) % 8) + (this.clean.has(t) ? 100 : 0) + (this.stops.has(t) ? stopBonus : 0);
    return s;
  }

  async step(plan: NativeStepPlan): Promise<NativeStepResult> {
    this.plans.push(plan);
    const late = plan.pendingMasks ? new Promise<NativeLateMask[]>((supply) => (this.gate = { stepId: plan.pendingMasks!.stepId, supply })) : null;
    this.onStep(plan);
    await new Promise<void>((r) => setImmediate(r));
    const withheld = new Set<string>();
    if (late) {
      for (const m of await late) {
        const row = plan.rows.find((r) => r.requestId === m.requestId)!;
        if (m.bitmask === null) withheld.add(m.requestId);
        else row.sample!.bitmask = m.bitmask;
      }
    }
    const rows = plan.rows.map((row): NativeStepRowResult => {
      if (withheld.has(row.requestId)) return { requestId: row.requestId, error: 'withheld' };
      const slot = (pos: number) => row.blockTable[pos >> 2]! * 4 + (pos & 3);
      row.tokens.forEach((t, i) => (this.kv[slot(row.contextLen + i)] = t));
      if (!row.sample) return { requestId: row.requestId };
      const ctx = Array.from({ length: row.contextLen + row.tokens.length }, (_, pos) => this.kv[slot(pos)]!);
      const ranked = ranking(this.scores(ctx));
      const mask = row.sample.bitmask;
      if (mask === 'pending') throw new Error(`${row.requestId}: its mask never arrived`);
      const allowed = mask === undefined ? ranked : ranked.filter((t) => isSet(mask, t));
      if (allowed.length === 0) return { requestId: row.requestId, error: 'sampling failed: grammar bitmask allows no token' };
      const res: NativeStepRowResult = { requestId: row.requestId, token: allowed[0]! };
      if (row.sample.logprobs > 0) {
        const top = this.candidates ? this.candidates(row.requestId, allowed) : allowed.slice(0, row.sample.logprobs);
        res.token = top[0]!;
        res.topLogprobs = top.map((token, k) => ({ token, logprob: -k }));
      }
      return res;
    });
    return { rows, timings: { forwardMs: 0, sampleMs: 0, tokens: 0 } };
  }
}

/** Counts speculation; `force` speculates in every state the engine allows (many misses). */
class Counting implements RequestGrammar {
  speculated = 0;
  misses = 0;
  disposed = 0;
  constructor(
    private readonly inner: RequestGrammar,
    private readonly force = false,
  ) {}
  next(): Promise<GrammarNext> {
    return this.inner.next();
  }
  accept(token: number): boolean {
    return this.inner.accept(token);
  }
  dispose(): void {
    this.disposed++;
    this.inner.dispose();
  }
  async speculate(): Promise<boolean> {
    const wide = await this.inner.speculate!();
    return this.force || wide;
  }
  async acceptBest(candidates: readonly number[]): Promise<GrammarPick> {
    const pick = await this.inner.acceptBest!(candidates);
    this.speculated++;
    if (pick.kind === 'miss') this.misses++;
    return pick;
  }
}

type Mode = 'mask' | 'speculate' | 'force';

const text = loadTokenizerDir(`${FIXTURE_ROOT}/qwen2-q4`);
const tok = text.tokenizer;
const service = grammarServiceFor(text, VOCAB);
const formats: ResponseFormat[] = SCHEMAS.map((schema) => parseResponseFormat({ type: 'json_schema', json_schema: { name: 's', schema, strict: true } })!);
const clean = new Set<number>();
for (let i = 0; i < tok.vocabSize; i++) if (!tok.isSpecialId(i) && !tok.decode([i]).includes('\uFFFD')) clean.add(i);
const WORDS = ['the', 'Ġriver', 'Ġstone', 'Ġcloud', 'Ġ7', ','].map((t) => tok.tokenToId(t)).filter((x): x is number => x !== undefined);

function greedy(maxTokens: number): SamplingParams {
  return resolveSamplingParams({ temperature: 0, maxTokens }, { maxTokens });
}

function prompt(i: number): number[] {
  return Array.from({ length: 3 + (i % 7) }, (_, k) => WORDS[mix(i, k) % WORDS.length]!);
}

interface Job {
  prompt: number[];
  schema: number | null;
  maxTokens: number;
}

interface Outcome {
  results: Collected[];
  grammars: (Counting | null)[];
  engine: Engine;
  model: RankedModel;
}

async function runJobs(jobs: Job[], mode: Mode, opts: { late?: boolean; maxNumSeqs?: number; setup?: (m: RankedModel) => void } = {}): Promise<Outcome> {
  const model = new RankedModel(clean, text.stopTokenIds, opts.late ?? true);
  opts.setup?.(model);
  const engine = new Engine({
    model,
    newTextStream: () => new StreamingDetokenizer(tok, { skipSpecialTokens: true }),
    stopTokenIds: text.stopTokenIds,
    maxNumSeqs: opts.maxNumSeqs ?? 8,
    maxBatchedTokens: 64,
    speculativeGrammar: mode !== 'mask',
  });
  const grammars = await Promise.all(jobs.map(async (j) => (j.schema === null ? null : new Counting(await service.matcher(formats[j.schema]!), mode === 'force'))));
  const handles = jobs.map((j, i) => engine.submit({ promptIds: j.prompt, params: greedy(j.maxTokens), grammar: grammars[i] ?? undefined, id: `r${i}` }));
  const results = await Promise.all(handles.map((h) => collect(h)));
  return { results, grammars, engine, model };
}

function summary(r: Collected): { tokens: number[]; text: string; finish?: string; error?: string } {
  return { tokens: r.tokens, text: r.text, finish: r.done?.finishReason, error: r.error?.message };
}

function total(gs: (Counting | null)[], key: 'speculated' | 'misses'): number {
  return gs.reduce((n, g) => n + (g?.[key] ?? 0), 0);
}

describe('the matcher: acceptBest is the masked argmax', () => {
  it('over random rankings in every state of random walks, with stop tokens anywhere in the list', async () => {
    let seed = 7;
    const rnd = (n: number) => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0), seed % n);
    const stop = [...text.stopTokenIds][0]!;
    let hits = 0;
    let misses = 0;
    let stopPicks = 0;
    let completes = 0;
    for (let walk = 0; walk < 60; walk++) {
      const schema = walk % SCHEMAS.length;
      const ref = await service.matcher(formats[schema]!); // the mask path
      const spec = await service.matcher(formats[schema]!); // the speculative path, in lockstep
      for (let step = 0; step < 80; step++) {
        const next = await ref.next();
        // A ranking of the whole vocabulary: whole-UTF-8 tokens first (so walks make progress), the
        // stop token at a random place, then the first k as the candidates.
        const order = Array.from({ length: VOCAB }, (_, t) => t).sort((a, b) => Number(clean.has(b)) - Number(clean.has(a)) || mix(walk * 1000 + step, a) - mix(walk * 1000 + step, b));
        order.splice(order.indexOf(stop), 1);
        order.splice(rnd(24), 0, stop);
        const k = 1 + rnd(20);
        const candidates = order.slice(0, k);
        const wasWide = await spec.speculate!(); // probes roll back: the state must not change
        expect(typeof wasWide).toBe('boolean');
        const pick = await spec.acceptBest!(candidates);
        if (next.kind !== 'mask') {
          // Complete (only stop allowed) or dead: speculation says the same, or misses (redone with the mask).
          if (candidates.includes(stop) || next.kind === 'dead') expect(['miss', next.kind]).toContain(pick.kind);
          else expect(pick.kind).toBe('miss');
          if (pick.kind === next.kind) completes++;
          break;
        }
        const best = order.find((t) => isSet(next.bitmask, t))!;
        if (candidates.includes(best)) {
          expect(pick, `walk ${walk} step ${step}`).toEqual({ kind: 'token', token: best });
          hits++;
          if (best === stop) stopPicks++;
        } else {
          expect(pick.kind).toBe('miss');
          // A miss leaves the matcher as it was: the same mask as the reference's.
          const again = await spec.next();
          expect(again.kind).toBe('mask');
          if (again.kind === 'mask') expect(Array.from(again.bitmask)).toEqual(Array.from(next.bitmask));
          expect(spec.accept(best)).toBe(true);
          misses++;
        }
        expect(ref.accept(best)).toBe(true);
        if (best === stop) break;
      }
      ref.dispose();
      spec.dispose();
    }
    expect(hits).toBeGreaterThan(200);
    expect(misses).toBeGreaterThan(20);
    expect(stopPicks).toBeGreaterThan(0);
    expect(completes).toBeGreaterThan(0);
  }, 60_000);

  it('a rejected token and the width probes leave the matcher unchanged', async () => {
    const g = await service.matcher(formats[SCHEMAS.length - 4]!); // title + words: wide string states
    let wide = 0;
    for (const piece of ['{"', 'title', '":"', 'ab', 'c', '","', 'words', '":["']) {
      const before = await g.next();
      expect(before.kind).toBe('mask');
      if (await g.speculate!()) wide++;
      for (let t = 0; t < VOCAB; t += 37) {
        if (before.kind === 'mask' && !isSet(before.bitmask, t) && !text.stopTokenIds.has(t)) expect(await g.acceptBest!([t])).toEqual({ kind: 'miss' });
      }
      const after = await g.next();
      if (before.kind === 'mask' && after.kind === 'mask') expect(Array.from(after.bitmask)).toEqual(Array.from(before.bitmask));
      const id = tok.encode(piece, { addSpecialTokens: false });
      for (const t of id) expect(g.accept(t)).toBe(true);
    }
    expect(wide).toBeGreaterThan(0); // inside the strings
    g.dispose();
  });
});

describe('the engine: speculation gives exactly the mask path', () => {
  const jobs: Job[] = Array.from({ length: 30 }, (_, i) => ({ prompt: prompt(i), schema: i % 5 === 4 ? null : i % SCHEMAS.length, maxTokens: i % 5 === 4 ? 10 : 60 }));

  it('same tokens, text and finish reasons for many schemas and prompts, with free-text neighbours', async () => {
    const mask = await runJobs(jobs, 'mask');
    const spec = await runJobs(jobs, 'speculate');
    const force = await runJobs(jobs, 'force');
    const maskNoLate = await runJobs(jobs, 'force', { late: false, maxNumSeqs: 3 });
    for (let i = 0; i < jobs.length; i++) {
      const want = summary(mask.results[i]!);
      expect(want.error, `job ${i}`).toBeUndefined();
      expect(summary(spec.results[i]!), `job ${i} (speculate)`).toEqual(want);
      expect(summary(force.results[i]!), `job ${i} (forced)`).toEqual(want);
      expect(summary(maskNoLate.results[i]!), `job ${i} (forced, masks in the plan)`).toEqual(want);
    }
    // Free-text rows never speculate or carry candidates.
    for (const plan of force.model.plans) {
      for (const row of plan.rows) if (row.sample && jobs[Number(row.requestId.slice(1))]!.schema === null) expect(row.sample.logprobs).toBe(-1);
    }
    expect(total(mask.grammars, 'speculated')).toBe(0);
    expect(total(spec.grammars, 'speculated')).toBeGreaterThan(50);
    expect(total(force.grammars, 'misses')).toBeGreaterThan(50);
    for (const r of [...spec.results, ...force.results]) if (r.done?.finishReason === 'stop' && r.text.startsWith('{')) expect(() => JSON.parse(r.text) as unknown).not.toThrow();
    for (const o of [mask, spec, force]) {
      expect(o.engine.stats().kv.usedBlocks).toBe(0);
      for (const g of o.grammars) if (g) expect(g.disposed).toBe(1);
    }
  }, 60_000);

  it('a forced miss (no candidate allowed) redoes the token under its mask at the same position', async () => {
    const banned = [...Array(VOCAB).keys()].filter((t) => (t >= tok.vocabSize || tok.isSpecialId(t)) && !text.stopTokenIds.has(t));
    expect(banned.length).toBeGreaterThan(0);
    const few = jobs.filter((j) => j.schema !== null).slice(0, 8);
    const mask = await runJobs(few, 'mask');
    const missAll = await runJobs(few, 'force', { setup: (m) => (m.candidates = () => banned.slice(0, 4)) });
    for (let i = 0; i < few.length; i++) expect(summary(missAll.results[i]!), `job ${i}`).toEqual(summary(mask.results[i]!));
    const g = missAll.grammars;
    expect(total(g, 'misses')).toBe(total(g, 'speculated'));
    expect(total(g, 'misses')).toBeGreaterThan(20);
    // Each speculative row is followed, next step, by a masked row of the same token and position.
    const plans = missAll.model.plans;
    let redone = 0;
    for (let s = 0; s + 1 < plans.length; s++) {
      for (const row of plans[s]!.rows) {
        if (!row.sample || row.sample.logprobs <= 0) continue;
        const again = plans[s + 1]!.rows.find((r) => r.requestId === row.requestId);
        if (again === undefined) continue; // ended (complete/dead) at the miss? not with banned-only candidates
        expect(again.contextLen).toBe(row.contextLen + row.tokens.length - 1);
        expect(Array.from(again.tokens)).toEqual([row.tokens.at(-1)]);
        expect(Array.from(again.positions)).toEqual([row.positions.at(-1)]);
        expect(again.sample?.logprobs).toBe(-1);
        expect(again.sample?.bitmask).toBeDefined();
        redone++;
      }
    }
    expect(redone).toBe(total(g, 'misses'));
  }, 30_000);

  it('stop-only states end with "stop" and no token; a stop token that wins among others is emitted', async () => {
    const boolJobs: Job[] = Array.from({ length: 6 }, (_, i) => ({ prompt: prompt(i), schema: SCHEMAS.length - 1, maxTokens: 20 }));
    const intJobs: Job[] = Array.from({ length: 6 }, (_, i) => ({ prompt: prompt(i + 40), schema: SCHEMAS.length - 2, maxTokens: 20 }));
    // Stop tokens rank first everywhere: speculation meets them before any other candidate. Where the
    // grammar cannot end yet they must be skipped; where it can end or go on (after a digit) the stop
    // token is the masked argmax and is emitted; where only stop is allowed the request ends without one.
    const stopsFirst = (m: RankedModel) => (m.stopsFirst = true);
    for (const js of [boolJobs, intJobs]) {
      const mask = await runJobs(js, 'mask', { setup: stopsFirst });
      const spec = await runJobs(js, 'force', { setup: stopsFirst });
      for (let i = 0; i < js.length; i++) {
        const want = summary(mask.results[i]!);
        expect(want.finish).toBe('stop');
        expect(summary(spec.results[i]!), `job ${i}`).toEqual(want);
      }
      const withStop = mask.results.filter((r) => r.tokens.some((t) => text.stopTokenIds.has(t))).length;
      if (js === boolJobs) expect(withStop).toBe(0); // "true"/"false" complete: nothing but stop could follow
      else expect(withStop).toBeGreaterThan(0); // after a digit (not "0") the stop token wins over more digits
      expect(total(spec.grammars, 'speculated')).toBeGreaterThan(0);
    }
  }, 30_000);

  it('max_tokens: finish "length" at exactly max_tokens, as with masks', async () => {
    const js: Job[] = Array.from({ length: 10 }, (_, i) => ({ prompt: prompt(i + 80), schema: i % 2 === 0 ? SCHEMAS.length - 4 : SCHEMAS.length - 3, maxTokens: 3 + (i % 4) }));
    const mask = await runJobs(js, 'mask');
    const force = await runJobs(js, 'force');
    for (let i = 0; i < js.length; i++) {
      expect(summary(force.results[i]!), `job ${i}`).toEqual(summary(mask.results[i]!));
      expect(force.results[i]!.done?.finishReason).toBe('length');
      expect(force.results[i]!.tokens.length).toBe(js[i]!.maxTokens);
      expect(force.results[i]!.done?.usage.completionTokens).toBe(js[i]!.maxTokens);
    }
    expect(total(force.grammars, 'misses')).toBeGreaterThan(0);
  });

  it('a cancel during a redo frees the blocks and the matcher within the step', async () => {
    const js: Job[] = Array.from({ length: 4 }, (_, i) => ({ prompt: prompt(i + 120), schema: SCHEMAS.length - 4, maxTokens: 60 }));
    let handles: RequestHandle[] = [];
    let aborted = 0;
    const model = new RankedModel(clean, text.stopTokenIds);
    const engine = new Engine({ model, newTextStream: () => new StreamingDetokenizer(tok, { skipSpecialTokens: true }), stopTokenIds: text.stopTokenIds, enablePrefixCache: false });
    const grammars = await Promise.all(js.map(async (j) => new Counting(await service.matcher(formats[j.schema!]!), true)));
    // Every speculative row misses; a redo row of r1 or r3 in flight is cancelled from inside the step.
    model.candidates = () => [...Array(VOCAB).keys()].filter((t) => (t >= tok.vocabSize || tok.isSpecialId(t)) && !text.stopTokenIds.has(t)).slice(0, 2);
    const lastSpec = new Set<string>();
    model.onStep = (plan) => {
      for (const row of plan.rows) {
        if (!row.sample) continue;
        const redo = row.sample.logprobs < 0 && lastSpec.has(row.requestId);
        if (redo && (row.requestId === 'r1' || row.requestId === 'r3') && grammars[Number(row.requestId.slice(1))]!.misses >= 2) {
          handles[Number(row.requestId.slice(1))]!.abort();
          aborted++;
        }
      }
      lastSpec.clear();
      for (const row of plan.rows) if (row.sample && row.sample.logprobs > 0) lastSpec.add(row.requestId);
    };
    handles = js.map((j, i) => engine.submit({ promptIds: j.prompt, params: greedy(j.maxTokens), grammar: grammars[i], id: `r${i}` }));
    const results = await Promise.all(handles.map((h) => collect(h)));
    expect(aborted).toBe(2);
    expect(results[1]!.done?.finishReason).toBe('abort');
    expect(results[3]!.done?.finishReason).toBe('abort');
    expect(results[0]!.error).toBeUndefined();
    expect(results[2]!.error).toBeUndefined();
    for (const g of grammars) expect(g.disposed).toBe(1);
    expect(engine.stats().kv.usedBlocks).toBe(0);
    expect(engine.stats().running + engine.stats().waiting).toBe(0);
  });
});

describe.skipIf(!nativeAvailable())('the real qwen2-q4 checkpoint: speculation on and off give the same outputs', () => {
  it('many schemas and prompts, concurrently, with free-text neighbours', async () => {
    const m = openTextModel(`${FIXTURE_ROOT}/qwen2-q4`, { threads: 2, precision: 'exact', kvCacheBytes: 32 << 20, blockSize: 16 });
    try {
      const info = m.native.info();
      const svc = grammarServiceFor(m.text, info.vocabSize);
      const fmts = SCHEMAS.map((schema) => parseResponseFormat({ type: 'json_schema', json_schema: { name: 's', schema, strict: true } })!);
      const words = ['river', 'stone', 'cloud', 'market', 'engine', 'yellow', 'quiet', 'seven'];
      const items = Array.from({ length: 24 }, (_, i) => ({
        prompt: m.encodePrompt({ prompt: `${words[i % words.length]} ${words[(i * 3 + 1) % words.length]} as JSON` }),
        schema: i % 6 === 5 ? null : i % SCHEMAS.length,
      }));
      const run = async (mode: Mode) => {
        const engine = new Engine({
          model: m.native,
          newTextStream: () => new StreamingDetokenizer(m.text.tokenizer, { skipSpecialTokens: true }),
          stopTokenIds: m.text.stopTokenIds,
          maxNumSeqs: 12,
          speculativeGrammar: mode !== 'mask',
        });
        const gs = await Promise.all(items.map(async (it) => (it.schema === null ? null : new Counting(await svc.matcher(fmts[it.schema]!), mode === 'force'))));
        const hs = items.map((it, i) => engine.submit({ promptIds: it.prompt, params: greedy(it.schema === null ? 12 : 48), grammar: gs[i] ?? undefined, id: `q${i}` }));
        const rs = await Promise.all(hs.map((h) => collect(h)));
        await engine.shutdown(1000);
        return { rs, gs };
      };
      const mask = await run('mask');
      const spec = await run('speculate');
      const force = await run('force');
      for (let i = 0; i < items.length; i++) {
        const want = summary(mask.rs[i]!);
        expect(want.error, `item ${i}`).toBeUndefined();
        expect(summary(spec.rs[i]!), `item ${i} (speculate)`).toEqual(want);
        expect(summary(force.rs[i]!), `item ${i} (forced)`).toEqual(want);
      }
      expect(total(spec.gs, 'speculated')).toBeGreaterThan(20);
      expect(total(force.gs, 'misses')).toBeGreaterThan(0);
    } finally {
      m.close();
    }
  }, 120_000);
});
