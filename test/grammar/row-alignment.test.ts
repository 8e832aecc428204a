// Row alignment, as a property: random sequences of joins, finishes and cancels of constrained and
// unconstrained requests (seeded PRNG, many rounds) on the real Engine with real xgrammar matchers
// over the qwen2 fixture tokenizer. The fake model samples only tokens its row's bitmask allows, so
// a mask on the wrong row shows up as a rejected token or an invalid output. Every row's mask must
// be the one its own matcher produced; every constrained output validates (ajv) against its own
// schema; every unconstrained output equals its solo greedy output.
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { Engine, type RequestHandle } from '../../src/engine/engine.js';
import { StreamingDetokenizer } from '../../src/engine/detokenizer.js';
import { grammarServiceFor } from '../../src/engine/grammar/grammar-service.js';
import type { GrammarNext, RequestGrammar } from '../../src/engine/grammar/request-grammar.js';
import { parseResponseFormat } from '../../src/server/response-format.js';
import { FakeModel } from '../helpers/fake-runner.js';
import { resolveSamplingParams } from '../../src/engine/sampling-params.js';
import type { NativeImageEmbedding, NativeLateMask, NativeModel, NativeModelInfo, NativeStepPlan, NativeStepResult } from '../../src/native/types.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { collect } from '../engine/helpers.js';
import { hashOf } from '../helpers/context-hash.js';

const VOCAB = 1024;

const SCHEMAS: Record<string, unknown>[] = [
  { type: 'object', properties: { color: { enum: ['red', 'green', 'blue'] }, n: { type: 'integer', minimum: -5, maximum: 40 } }, required: ['color', 'n'], additionalProperties: false },
  {
    type: 'object',
    properties: {
      user: { type: 'object', properties: { id: { type: 'integer', minimum: 1, maximum: 999 }, ok: { type: 'boolean' } }, required: ['id', 'ok'], additionalProperties: false },
      tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, minItems: 1, maxItems: 3 },
    },
    required: ['user', 'tags'],
    additionalProperties: false,
  },
  { type: 'object', properties: { code: { type: 'string', pattern: '^[A-Z]{2}[0-9]{2}$' }, name: { type: 'string', maxLength: 6 } }, required: ['code', 'name'], additionalProperties: false },
  { type: 'array', items: { type: 'integer', minimum: 0, maximum: 9 }, minItems: 2, maxItems: 4 },
];

/**
 * Keeps each request's context by id and samples greedily from it: unconstrained rows from a fixed
 * word list (a pure function of the context), constrained rows among the tokens their bitmask allows
 * (preferring tokens that are whole UTF-8 on their own). `onStep` runs before each step.
 */
class MaskedModel implements NativeModel {
  private readonly base = new FakeModel({ vocabSize: VOCAB, contextLength: 1024, numBlocks: 2048, blockSize: 4 });
  /** A paged "KV": the token at each slot, read back through the block table (prefix-cache hits too). */
  private readonly kv = new Int32Array(2048 * 4).fill(-1);
  onStep: (plan: NativeStepPlan) => void = () => undefined;
  constructor(
    private readonly free: number[],
    private readonly clean: Set<number>,
  ) {}
  info(): NativeModelInfo {
    return this.base.info();
  }
  encodeImage(): Promise<NativeImageEmbedding> {
    return Promise.reject(new Error('no vision'));
  }
  close(): void {}
  freeNext(ctx: readonly number[]): number {
    return this.free[hashOf(ctx) % this.free.length]!;
  }
  /** Two-phase rounds: masks arrive through supplyMasks while the step "runs". */
  supplyMasks?: (stepId: number, masks: NativeLateMask[]) => boolean;
  onMasks: (plan: NativeStepPlan, masks: NativeLateMask[]) => void = () => undefined;
  private gate: { stepId: number; supply: (m: NativeLateMask[]) => void } | null = null;
  enableLateMasks(): void {
    this.supplyMasks = (stepId, masks) => {
      if (this.gate?.stepId !== stepId) return false;
      this.gate.supply(masks);
      this.gate = null;
      return true;
    };
  }
  async step(plan: NativeStepPlan): Promise<NativeStepResult> {
    const late = plan.pendingMasks ? new Promise<NativeLateMask[]>((supply) => (this.gate = { stepId: plan.pendingMasks!.stepId, supply })) : null;
    this.onStep(plan);
    await new Promise<void>((r) => setImmediate(r));
    const withheld = new Set<string>();
    if (late) {
      const masks = await late;
      this.onMasks(plan, masks);
      for (const m of masks) {
        const row = plan.rows.find((r) => r.requestId === m.requestId)!;
        if (m.bitmask === null) withheld.add(m.requestId);
        else row.sample!.bitmask = m.bitmask;
      }
    }
    const rows = plan.rows.map((row) => {
      if (withheld.has(row.requestId)) return { requestId: row.requestId, error: 'withheld' };
      const slot = (pos: number) => row.blockTable[pos >> 2]! * 4 + (pos & 3);
      row.tokens.forEach((t, i) => (this.kv[slot(row.contextLen + i)] = t));
      if (!row.sample) return { requestId: row.requestId };
      const ctx = Array.from({ length: row.contextLen + row.tokens.length }, (_, pos) => this.kv[slot(pos)]!);
      const mask = row.sample.bitmask;
      if (mask === 'pending') throw new Error(`${row.requestId}: its mask never arrived`);
      if (!mask) return { requestId: row.requestId, token: this.freeNext(ctx) };
      const allowed: number[] = [];
      for (let i = 0; i < VOCAB; i++) if ((mask[i >> 5]! >>> (i & 31)) & 1) allowed.push(i);
      const whole = allowed.filter((t) => this.clean.has(t));
      const pool = whole.length > 0 ? whole : allowed;
      return { requestId: row.requestId, token: pool[hashOf(ctx) % pool.length]! };
    });
    return { rows, timings: { forwardMs: 0, sampleMs: 0, tokens: 0 } };
  }
}

/** Wraps a matcher to remember the last mask it produced (the one its row must carry). */
class Watched implements RequestGrammar {
  last: Int32Array | null = null;
  constructor(private readonly inner: RequestGrammar) {}
  async next(): Promise<GrammarNext> {
    const n = await this.inner.next();
    this.last = n.kind === 'mask' ? n.bitmask : null;
    return n;
  }
  accept(token: number): boolean {
    return this.inner.accept(token);
  }
  dispose(): void {
    this.inner.dispose();
  }
}

describe('row alignment under random join / finish / cancel', () => {
  const text = loadTokenizerDir(`${FIXTURE_ROOT}/qwen2-q4`);
  const tok = text.tokenizer;
  const service = grammarServiceFor(text, VOCAB);
  const formats = SCHEMAS.map((schema) => parseResponseFormat({ type: 'json_schema', json_schema: { name: 's', schema, strict: true } })!);
  const ajv = new Ajv({ strict: false });
  const validators = SCHEMAS.map((s) => ajv.compile(s));
  const free = ['the', 'Ġriver', 'Ġstone', 'Ġcloud', 'Ġ7', ','].map((t) => tok.tokenToId(t)).filter((x): x is number => x !== undefined);
  const clean = new Set<number>();
  for (let i = 0; i < tok.vocabSize; i++) if (!tok.isSpecialId(i) && !tok.decode([i]).includes('\uFFFD')) clean.add(i);

  it('never puts a matcher on the wrong row (40 seeded rounds)', async () => {
    let seed = 20260501;
    const rnd = (n: number) => {
      seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
      return seed % n;
    };
    let constrainedDone = 0;
    let cancelled = 0;
    let lateMasks = 0;
    for (let round = 0; round < 40; round++) {
      const model = new MaskedModel(free, clean);
      const engine = new Engine({
        model,
        newTextStream: () => new StreamingDetokenizer(tok, { skipSpecialTokens: true }),
        stopTokenIds: text.stopTokenIds,
        maxNumSeqs: 1 + rnd(12),
        maxBatchedTokens: 16 + rnd(64),
        enablePrefixCache: rnd(2) === 0,
      });
      interface Live {
        id: string;
        prompt: number[];
        schema: number | null;
        grammar: Watched | null;
        handle: RequestHandle;
        result: ReturnType<typeof collect>;
        maxTokens: number;
      }
      const live: Live[] = [];
      let n = 0;
      const join = async () => {
        const id = `r${round}-${n++}`;
        const prompt = Array.from({ length: 3 + rnd(20) }, () => free[rnd(free.length)]!);
        const schema = rnd(3) === 0 ? null : rnd(SCHEMAS.length);
        const grammar = schema === null ? null : new Watched(await service.matcher(formats[schema]!));
        const maxTokens = schema === null ? 4 + rnd(12) : 200;
        const params = resolveSamplingParams({ temperature: 0, maxTokens }, { maxTokens });
        const handle = engine.submit({ promptIds: prompt, params, id, grammar: grammar ?? undefined });
        live.push({ id, prompt, schema, grammar, handle, result: collect(handle), maxTokens });
      };
      const pending: Promise<void>[] = [];
      // Even rounds: two-phase steps (masks computed while the step runs, supplied late).
      const twoPhase = round % 2 === 0;
      if (twoPhase) model.enableLateMasks();
      model.onMasks = (plan, masks) => {
        // Late: exactly the constrained sampling rows get an entry, each its own latest mask (or
        // null once its request ended), never another row's.
        const want = plan.rows.filter((row) => row.sample && live.find((l) => l.id === row.requestId)!.grammar !== null).map((row) => row.requestId);
        expect(masks.map((m) => m.requestId)).toEqual(want);
        for (const m of masks) {
          const r = live.find((l) => l.id === m.requestId)!;
          if (m.bitmask !== null) expect(m.bitmask, m.requestId).toBe(r.grammar!.last);
          lateMasks++;
        }
      };
      model.onStep = (plan) => {
        // The property: a row carries a mask iff it is constrained, and then exactly its own latest
        // (two-phase: 'pending', checked when the masks arrive).
        for (const row of plan.rows) {
          const r = live.find((l) => l.id === row.requestId)!;
          if (!row.sample) continue;
          if (r.grammar === null) expect(row.sample.bitmask, row.requestId).toBeUndefined();
          else if (twoPhase) expect(row.sample.bitmask, row.requestId).toBe('pending');
          else expect(row.sample.bitmask, row.requestId).toBe(r.grammar.last);
        }
        // Random events between steps: joins and cancels.
        if (n < 24 && rnd(3) === 0) pending.push(join());
        if (rnd(6) === 0 && live.length > 0) {
          live[rnd(live.length)]!.handle.abort();
          cancelled++;
        }
      };
      for (let i = 0; i < 2 + rnd(6); i++) await join();
      // Joins made during steps add requests while we wait: wait until none is left to come.
      do {
        await Promise.all(pending.splice(0));
        await Promise.all(live.map((l) => l.result));
      } while (pending.length > 0);
      for (const l of live) {
        const r = await l.result;
        expect(r.error, `${l.id}: ${r.error?.message}`).toBeUndefined();
        if (r.done!.finishReason === 'abort') continue;
        if (l.schema === null) {
          // Unconstrained neighbour: its own greedy continuation, whatever ran beside it.
          const want: number[] = [];
          const ctx = [...l.prompt];
          while (want.length < l.maxTokens) {
            const t = model.freeNext(ctx);
            want.push(t);
            ctx.push(t);
          }
          expect(r.tokens, l.id).toEqual(want);
          continue;
        }
        expect(r.done!.finishReason, `${l.id}: ${r.text}`).toBe('stop');
        const value = JSON.parse(r.text) as unknown;
        expect(validators[l.schema]!(value), `${l.id} schema ${l.schema}: ${r.text}`).toBe(true);
        constrainedDone++;
      }
    }
    expect(constrainedDone).toBeGreaterThan(100);
    expect(lateMasks).toBeGreaterThan(1000);
    expect(cancelled).toBeGreaterThan(10);
  }, 120_000);
});
