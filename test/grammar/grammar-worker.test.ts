// xgrammar in its worker thread, real wasm: a real trap (the 60-deep schema, sent unchecked), an
// injected trap mid-mask and a compile past its time limit each fail only the call that caused
// them; live matchers are replayed in the fresh instance and give the same masks as a reference.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { InvalidRequestError } from '../../src/errors/request-errors.js';
import { grammarFaults } from '../../src/engine/grammar/grammar-faults.js';
import { GrammarService } from '../../src/engine/grammar/grammar-service.js';
import type { RequestGrammar } from '../../src/engine/grammar/request-grammar.js';
import type { ResponseFormat } from '../../src/server/response-format.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';

const text = loadTokenizerDir(`${FIXTURE_ROOT}/qwen2-q4`);
const VOCAB = 1024;
const make = (extra: Partial<ConstructorParameters<typeof GrammarService>[0]> = {}) =>
  new GrammarService({ tokenizer: text.tokenizer, vocabSize: VOCAB, stopTokenIds: text.stopTokenIds, ...extra });

const fmt = (schema: unknown): ResponseFormat => ({ type: 'json_schema', name: 's', schema, strict: true });
const PERSON = fmt({
  type: 'object',
  properties: { name: { type: 'string', maxLength: 12 }, tags: { type: 'array', items: { enum: ['a', 'bb', 'ccc'] }, maxItems: 6 }, age: { type: 'integer', minimum: 0, maximum: 120 } },
  required: ['name', 'tags', 'age'],
  additionalProperties: false,
});
const VICTIM = fmt({ description: 'victim', type: 'object', properties: { x: { type: 'string' } }, required: ['x'] });

function nest(d: number): unknown {
  let s: unknown = { type: 'string' };
  for (let i = 0; i < d; i++) s = { type: 'object', properties: { a: s }, required: ['a'] };
  return s;
}

/** The k-th allowed token of a mask (a deterministic walk that is the same for the same masks). */
function pick(mask: Int32Array, step: number): number {
  const allowed: number[] = [];
  for (let t = 0; t < VOCAB; t++) if ((mask[t >> 5]! >>> (t & 31)) & 1 && !text.stopTokenIds.has(t)) allowed.push(t);
  return allowed.length === 0 ? [...text.stopTokenIds][0]! : allowed[(step * 7919) % allowed.length]!;
}

/** Walks `steps` tokens; returns the masks seen (as arrays). `during(step)` runs after each accept. */
async function walk(g: RequestGrammar, steps: number, during?: (step: number) => Promise<void>): Promise<string[]> {
  const seen: string[] = [];
  for (let step = 0; step < steps; step++) {
    const n = await g.next();
    if (n.kind !== 'mask') {
      seen.push(n.kind);
      break;
    }
    seen.push(Array.from(n.bitmask).join(','));
    expect(g.accept(pick(n.bitmask, step))).toBe(true);
    await during?.(step);
  }
  return seen;
}

const services: GrammarService[] = [];
afterEach(() => {
  for (const k of Object.keys(grammarFaults)) delete grammarFaults[k as keyof typeof grammarFaults];
});
afterAll(async () => {
  await Promise.all(services.map((s) => s.close()));
});

describe('the grammar worker', () => {
  const refService = make();
  services.push(refService);

  it('a real xgrammar trap fails only its compile; a live matcher is replayed with the same masks', async () => {
    const ref = await walk(await refService.matcher(PERSON), 24);
    const svc = make({ checkLimits: false });
    services.push(svc);
    const g = await svc.matcher(PERSON);
    let trapped: unknown = null;
    const got = await walk(g, 24, async (step) => {
      if (step !== 8) return;
      trapped = await svc.compile(fmt(nest(60))).catch((err: unknown) => err);
      expect(svc.health().status).toBe('degraded'); // until the replay is done
    });
    expect(trapped).toBeInstanceOf(InvalidRequestError);
    expect((trapped as Error).message).toMatch(/memory access out of bounds/);
    expect(svc.rebuilds).toBe(1);
    expect(got).toEqual(ref);
    expect(svc.health().status).toBe('ok');
    // The instance works: a new schema and the trapped one's neighbours.
    expect((await (await svc.matcher(VICTIM)).next()).kind).toBe('mask');
    // The refused schema is refused again at once, without another trap.
    await expect(svc.compile(fmt(nest(60)))).rejects.toThrow(/memory access out of bounds/);
    expect(svc.rebuilds).toBe(1);
  });

  it('an injected trap mid-mask fails that request alone; a neighbour in the same batch goes on unchanged', async () => {
    const ref = await walk(await refService.matcher(PERSON), 30);
    const svc = make();
    services.push(svc);
    const victim = await svc.matcher(VICTIM);
    const g = await svc.matcher(PERSON);
    const got = await walk(g, 30, async (step) => {
      if (step !== 5) return;
      grammarFaults.trapMask = (schema) => schema.includes('victim');
      // Both in one batch: the victim's op traps, the neighbour's is answered or replayed.
      const [v, n] = await Promise.allSettled([victim.next(), g.next()]);
      delete grammarFaults.trapMask;
      expect(v.status).toBe('rejected');
      expect(n.status).toBe('fulfilled');
      expect(String((v as PromiseRejectedResult).reason)).toMatch(/injected/);
    });
    expect(got).toEqual(ref);
    expect(svc.rebuilds).toBe(1);
    // The victim stays failed (it is not replayed); disposing it is harmless.
    await expect(victim.next()).rejects.toThrow(/grammar failed/);
    victim.dispose();
  });

  it('a replay rebuilds the UTF-8 guard and budget closing: the same masks and closing after a trap', async () => {
    // Told a tight max_tokens, the walk ends in the closing budget closing forces; a trap mid-walk
    // (at a lead byte, and inside the forced closing) must change nothing the request sees.
    const BUDGET = 24;
    const LEAD = [...Array(VOCAB).keys()].find((t) => text.tokenizer.idToToken(t) === '\u00e4')!; // byte-level E4
    const quoted = fmt({ type: 'object', properties: { s: { type: 'string', maxLength: 40 } }, required: ['s'], additionalProperties: false });
    const open = ['{', '"', 's', '"', ':', '"'].map((c) => text.tokenizer.tokenToId(c)!);
    const run = async (svc: GrammarService, trapAt: ReadonlySet<number>) => {
      const victims = [];
      const g = await svc.matcher(quoted, { maxTokens: BUDGET });
      const seen: string[] = [];
      for (let step = 0; step < BUDGET; step++) {
        g.setTokensLeft?.(BUDGET - step);
        if (trapAt.has(step)) {
          const victim = await svc.matcher(VICTIM);
          victims.push(victim);
          grammarFaults.trapMask = (schema) => schema.includes('victim');
          await expect(victim.next()).rejects.toThrow(/injected/);
          delete grammarFaults.trapMask;
        }
        const n = await g.next();
        if (n.kind !== 'mask') {
          seen.push(n.kind);
          break;
        }
        seen.push(Array.from(n.bitmask).join(','));
        const t = step < open.length ? open[step]! : step === open.length ? LEAD : pick(n.bitmask, step);
        expect(g.accept(t), `step ${step}`).toBe(true);
      }
      const closed = g.closedByBudget?.() === true;
      g.dispose();
      for (const v of victims) v.dispose();
      return { seen, closed };
    };
    const ref = await run(refService, new Set());
    expect(ref.closed).toBe(true); // the walk needed closing
    const svc = make();
    services.push(svc);
    // Right after the lead byte (mid-character), and inside the forced closing.
    const got = await run(svc, new Set([open.length + 1, 21]));
    expect(svc.rebuilds).toBe(2);
    expect(got).toEqual(ref);
  });

  it('a compile past compileTimeoutMs is stopped and refused naming the limit; the neighbour goes on', async () => {
    const ref = await walk(await refService.matcher(PERSON), 20);
    const svc = make({ workerLimits: { compileTimeoutMs: 150 } });
    services.push(svc);
    const g = await svc.matcher(PERSON);
    const big = fmt({ type: 'object', properties: Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`key${i}`, { type: 'integer' }])) });
    let refused: unknown = null;
    const got = await walk(g, 20, async (step) => {
      if (step === 4) refused = await svc.compile(big).catch((err: unknown) => err);
    });
    expect(refused).toBeInstanceOf(InvalidRequestError);
    expect((refused as Error).message).toMatch(/compileTimeoutMs = 150 ms/);
    expect(got).toEqual(ref);
    expect(svc.rebuilds).toBe(1);
    const t = performance.now();
    await expect(svc.compile(big)).rejects.toThrow(/compileTimeoutMs/); // refused again at once
    expect(performance.now() - t).toBeLessThan(100);
  }, 30_000);

  it('an instance whose wasm memory grew past maxWasmBytes is replaced between batches, failing nothing', async () => {
    const ref = await walk(await refService.matcher(PERSON), 24);
    const svc = make({ workerLimits: { maxWasmBytes: 4 << 20 } }); // this fixture's instance starts at 16 MiB
    services.push(svc);
    const g = await svc.matcher(PERSON);
    const compiled: string[] = [];
    const got = await walk(g, 24, async (step) => {
      if (step >= 8) return;
      // Large grammars, each new: the instance's memory grows by a few MiB.
      const schema = { type: 'object', properties: Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`s${step}_${i}`, { type: 'integer' }])) };
      compiled.push(await svc.compile(fmt(schema)));
    });
    expect(compiled).toHaveLength(8);
    expect(svc.rebuilds).toBeGreaterThanOrEqual(1);
    expect(got).toEqual(ref);
    expect(svc.health().status).toBe('ok');
  }, 60_000);

  it('the event loop keeps turning while the largest allowed schema compiles', async () => {
    const svc = make();
    services.push(svc);
    await svc.compile(PERSON); // the instance is up
    const big = fmt({ type: 'object', properties: Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`p${i}`, { type: 'integer' }])) });
    let worst = 0;
    let last = performance.now();
    const tick = setInterval(() => {
      const now = performance.now();
      worst = Math.max(worst, now - last);
      last = now;
    }, 5);
    const t = performance.now();
    await svc.compile(big);
    clearInterval(tick);
    const compileMs = performance.now() - t;
    expect(compileMs).toBeGreaterThan(100); // it did real work meanwhile
    expect(worst).toBeLessThan(Math.max(250, compileMs / 4));
  }, 30_000);
});
