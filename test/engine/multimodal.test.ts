// Images through the engine on the FakeModel's vision tower: outputs against the fake's oracle
// (embeddings from the pixels, stored 3-axis positions, index + rope delta after the prompt), the
// encoder cache, chunking around image spans, prefix-cache keys, failures and cancellation.
import { describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.js';
import type { FakeModel, FakeModelOptions } from '../helpers/fake-runner.js';
import { embeddingBytes } from '../../src/engine/encoder-cache.js';
import { collect, makeEngine, params, sleep } from './helpers.js';
import { bytes } from './helpers.js';
import { fakeImage, imagePrompt, type ImagePrompt } from './multimodal-helpers.js';
import type { EngineOptions } from '../../src/engine/engine.js';

const QWEN: FakeModelOptions = { vision: { mrope: true }, blockSize: 4, numBlocks: 256, contextLength: 512 };

function vlm(fake: FakeModelOptions = QWEN, opts: Partial<EngineOptions> = {}): { engine: Engine; model: FakeModel } {
  return makeEngine(fake, { maxBatchedTokens: 16, ...opts });
}

async function run(engine: Engine, p: ImagePrompt, n = 12) {
  return collect(engine.submit({ promptIds: p.promptIds, multimodal: p.multimodal, params: params({ maxTokens: n }) }));
}

/** Every image span of every row's request lies wholly inside or wholly outside that row. */
function expectNoSplitSpans(model: FakeModel, spansById: Map<string, [number, number][]>) {
  let rowsWithImages = 0;
  for (const plan of model.plans) {
    for (const row of plan.rows) {
      const spans = spansById.get(row.requestId) ?? [];
      const a = row.contextLen;
      const b = a + row.tokens.length;
      for (const [s, e] of spans) {
        const disjoint = e <= a || s >= b;
        const inside = s >= a && e <= b;
        expect(disjoint || inside, `${row.requestId}: row [${a}, ${b}) splits span [${s}, ${e})`).toBe(true);
        if (inside) rowsWithImages++;
      }
      if (row.embeds) {
        const covered = spans.filter(([s, e]) => s >= a && e <= b).reduce((n, [s, e]) => n + e - s, 0);
        expect(row.embeds.offsets.length).toBe(covered);
      }
    }
  }
  return rowsWithImages;
}

describe('engine: images on the fake vision tower', () => {
  const big = fakeImage(11, 8, 6); // 12 tokens: more than a 8-token budget
  const small = fakeImage(22, 4, 4); // 4 tokens
  const other = fakeImage(33, 4, 4); // same size as small, other pixels

  it('an image request produces the oracle output; the rope delta drives decode positions', async () => {
    const { engine, model } = vlm();
    const p = imagePrompt(['describe ', big, ' please'], true);
    expect(p.multimodal.ropeDelta).toBeLessThan(0);
    const r = await run(engine, p);
    expect(r.error).toBeUndefined();
    expect(r.tokens).toEqual(model.greedyMultimodal(p.promptIds, p.multimodal, 12));
    // A leaked or dropped delta would change the output: the oracle without it differs.
    expect(model.greedyMultimodal(p.promptIds, { ...p.multimodal, ropeDelta: 0 }, 12)).not.toEqual(r.tokens);
    const decode = model.plans.flatMap((pl) => pl.rows).filter((row) => row.tokens.length === 1 && row.contextLen >= p.promptIds.length);
    expect(decode.length).toBeGreaterThan(0);
    for (const row of decode) {
      const want = row.contextLen + p.multimodal.ropeDelta!;
      expect([...row.positions]).toEqual([want, want, want]);
    }
    expect(model.encodeCalls.length).toBe(1);
  });

  it('mRoPE locality: two image requests of different sizes and a text request, joined mid-stream, each give their solo output', async () => {
    const a = imagePrompt(['first ', big, ' end'], true);
    const b = imagePrompt(['second image: ', small, ' and ', other, ' done'], true);
    const text = bytes('just some text without images');
    const solo = async (f: (e: Engine) => Promise<number[]>) => {
      const { engine } = vlm();
      return f(engine);
    };
    const soloA = await solo(async (e) => (await run(e, a, 20)).tokens);
    const soloB = await solo(async (e) => (await run(e, b, 20)).tokens);
    const soloT = await solo(async (e) => (await collect(e.submit({ promptIds: text, params: params({ maxTokens: 20 }) }))).tokens);
    const { engine, model } = vlm(QWEN, { maxBatchedTokens: 8 });
    expect(soloA).toEqual(model.greedyMultimodal(a.promptIds, a.multimodal, 20));
    expect(soloB).toEqual(model.greedyMultimodal(b.promptIds, b.multimodal, 20));
    expect(soloT).toEqual(model.greedy(text, 20)); // text on a VLM is plain 1-D text

    const ha = engine.submit({ promptIds: a.promptIds, multimodal: a.multimodal, params: params({ maxTokens: 20 }), id: 'a' });
    const ca = collect(ha);
    await sleep(0);
    await new Promise((r) => setImmediate(r));
    const ht = engine.submit({ promptIds: text, params: params({ maxTokens: 20 }), id: 't' });
    const ct = collect(ht);
    for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
    const hb = engine.submit({ promptIds: b.promptIds, multimodal: b.multimodal, params: params({ maxTokens: 20 }), id: 'b' });
    const [ra, rt, rb] = await Promise.all([ca, ct, collect(hb)]);
    expect(ra.tokens).toEqual(soloA);
    expect(rt.tokens).toEqual(soloT);
    expect(rb.tokens).toEqual(soloB);
    // They really shared steps.
    expect(model.plans.some((pl) => pl.rows.length >= 2 && pl.rows.some((r) => r.embeds))).toBe(true);
    const spans = new Map<string, [number, number][]>([
      ['a', a.multimodal.images.map((i) => [i.offset, i.offset + i.length] as [number, number])],
      ['b', b.multimodal.images.map((i) => [i.offset, i.offset + i.length] as [number, number])],
    ]);
    expect(expectNoSplitSpans(model, spans)).toBe(3);
  });

  it('text-only requests on a VLM never touch the encoder and get 1-D-equivalent positions', async () => {
    const { engine, model } = vlm();
    const prompt = bytes('hello there, a plain text request');
    const r = await collect(engine.submit({ promptIds: prompt, params: params({ maxTokens: 10 }) }));
    expect(r.tokens).toEqual(model.greedy(prompt, 10));
    expect(model.encodeCalls.length).toBe(0);
    expect(engine.stats().encoderCache.misses).toBe(0);
    for (const row of model.plans.flatMap((p) => p.rows)) {
      const n = row.tokens.length;
      expect(row.embeds).toBeUndefined();
      for (let i = 0; i < n; i++) {
        const idx = row.contextLen + i;
        expect([row.positions[i], row.positions[n + i], row.positions[2 * n + i]]).toEqual([idx, idx, idx]);
      }
    }
  });

  it('chunks never split an image span; a span larger than the budget goes whole', async () => {
    const { engine, model } = vlm(QWEN, { maxBatchedTokens: 8 });
    const p = imagePrompt(['ab', small, 'cdefg', big, 'xyz'], true);
    const r = await run(engine, p);
    expect(r.tokens).toEqual(model.greedyMultimodal(p.promptIds, p.multimodal, 12));
    const spans = p.multimodal.images.map((i) => [i.offset, i.offset + i.length] as [number, number]);
    const id = model.plans[0]!.rows[0]!.requestId;
    expect(expectNoSplitSpans(model, new Map([[id, spans]]))).toBe(2);
    // The 12-token span went in one row although the budget is 8.
    expect(model.plans.some((pl) => pl.rows.some((row) => row.tokens.length >= 12 && row.embeds?.offsets.length === 12))).toBe(true);
    // And the chunk before it was cut at the span's start.
    const bigStart = p.multimodal.images[1]!.offset;
    expect(model.plans.some((pl) => pl.rows.some((row) => row.contextLen + row.tokens.length === bigStart))).toBe(true);
  });

  it('encoder cache: a resent image is a hit, another image a miss, and the LRU evicts by bytes', async () => {
    const bytesPerImage = embeddingBytes(fakeImageEmbedding(small));
    const { engine, model } = vlm(QWEN, { encoderCacheBytes: bytesPerImage * 1.5, enablePrefixCache: false });
    const p1 = imagePrompt(['q1 ', small, ' ?'], true);
    const p1again = imagePrompt(['another question about ', small, ' ?'], true);
    const p2 = imagePrompt(['q2 ', other, ' ?'], true);
    await run(engine, p1);
    expect(model.encodeCalls.length).toBe(1);
    const r = await run(engine, p1again);
    expect(r.tokens).toEqual(model.greedyMultimodal(p1again.promptIds, p1again.multimodal, 12));
    expect(model.encodeCalls.length).toBe(1); // hit
    expect(engine.stats().encoderCache).toMatchObject({ hits: 1, misses: 1, entries: 1 });
    const r2 = await run(engine, p2);
    expect(r2.tokens).toEqual(model.greedyMultimodal(p2.promptIds, p2.multimodal, 12)); // not the cached image
    expect(model.encodeCalls.length).toBe(2);
    expect(engine.stats().encoderCache).toMatchObject({ misses: 2, evictions: 1, entries: 1 });
    expect(engine.stats().encoderCache.bytes).toBeLessThanOrEqual(bytesPerImage * 1.5);
    await run(engine, p1); // evicted: encoded again
    expect(model.encodeCalls.length).toBe(3);
  });

  it('two in-flight requests with the same image share one encode', async () => {
    const { engine, model } = vlm({ ...QWEN, vision: { mrope: true, encodeMs: 20 } }, { enablePrefixCache: false });
    const p1 = imagePrompt(['one ', big, ' ?'], true);
    const p2 = imagePrompt(['two: ', big, ' !'], true);
    const [r1, r2] = await Promise.all([run(engine, p1), run(engine, p2)]);
    expect(r1.tokens).toEqual(model.greedyMultimodal(p1.promptIds, p1.multimodal, 12));
    expect(r2.tokens).toEqual(model.greedyMultimodal(p2.promptIds, p2.multimodal, 12));
    expect(model.encodeCalls.length).toBe(1);
  });

  it('the same image at another resolution is another cache entry', async () => {
    const { engine, model } = vlm();
    const a = fakeImage(5, 4, 4);
    const b = { ...fakeImage(5, 4, 8), hash: a.hash }; // same content hash, other preprocessing
    await run(engine, imagePrompt(['x ', a], true));
    const p = imagePrompt(['x ', b], true);
    const r = await run(engine, p);
    expect(model.encodeCalls.length).toBe(2);
    expect(r.tokens).toEqual(model.greedyMultimodal(p.promptIds, p.multimodal, 12));
  });

  it('prefix-cache keys include the image: same tokens with another image miss, the same image hits', async () => {
    const { engine, model } = vlm(QWEN, { encoderCacheBytes: 0 });
    const text = 'a shared system prompt that is long enough for blocks ';
    const pa = imagePrompt([text, small, ' tail question'], true);
    const pb = imagePrompt([text, other, ' tail question'], true);
    expect(pb.promptIds).toEqual(pa.promptIds); // identical token ids: only the image differs
    const imgStart = pa.multimodal.images[0]!.offset;
    const ra = await run(engine, pa);
    const rb = await run(engine, pb);
    expect(rb.tokens).toEqual(model.greedyMultimodal(pb.promptIds, pb.multimodal, 12));
    expect(rb.tokens).not.toEqual(ra.tokens);
    expect(rb.done!.usage.cachedTokens).toBeLessThanOrEqual(imgStart); // the text prefix only
    expect(rb.done!.usage.cachedTokens).toBeGreaterThan(0);
    const ra2 = await run(engine, pa);
    expect(ra2.tokens).toEqual(ra.tokens);
    expect(ra2.done!.usage.cachedTokens).toBeGreaterThanOrEqual(imgStart + 4); // past the image
    // The whole image came from KV: no encode for the hit.
    expect(model.encodeCalls.length).toBe(2);
  });

  it('a prefix hit never ends inside an image span', async () => {
    const { engine, model } = vlm();
    // Block size 4; the 12-token span is [2, 14). A prompt that ends with the image could reuse at
    // most 3 cached blocks (12 tokens: inside the span), so it must fall back to a block boundary
    // outside the span: 0 here.
    const p = imagePrompt(['ab', big, 'cdefghij'], true);
    await run(engine, p);
    const q = imagePrompt(['ab', big], true);
    const r = await run(engine, q);
    expect(r.tokens).toEqual(model.greedyMultimodal(q.promptIds, q.multimodal, 12));
    expect(r.done!.usage.cachedTokens).toBe(0);
    // A longer prompt reuses past the span.
    const r2 = await run(engine, imagePrompt(['ab', big, 'cdefgXYZ more'], true));
    expect(r2.done!.usage.cachedTokens).toBe(16);
  });

  it('an encoder failure fails only that request, with a clear error', async () => {
    const bad = fakeImage(99, 4, 4);
    const fake: FakeModelOptions = { ...QWEN, vision: { mrope: true, encodeMs: 5, failOn: (i) => i.pixels === bad.input.pixels } };
    const { engine, model } = vlm(fake);
    const good = imagePrompt(['fine ', big, ' ok'], true);
    const broken = imagePrompt(['broken ', bad, ' ?'], true);
    const text = bytes('a text request alongside');
    const [rg, rb, rt] = await Promise.all([
      run(engine, good),
      run(engine, broken),
      collect(engine.submit({ promptIds: text, params: params({ maxTokens: 12 }) })),
    ]);
    expect(rb.error?.message).toMatch(/image encoder failed for image 0.*fake vision tower/);
    expect(rb.error?.code).toBe('encoder_failed');
    expect(rg.tokens).toEqual(model.greedyMultimodal(good.promptIds, good.multimodal, 12));
    expect(rt.tokens).toEqual(model.greedy(text, 12));
    expect(engine.health().ok).toBe(true);
    expect(engine.stats().kv.usedBlocks).toBe(0);
    // The failure is not cached: the next request with that image tries again (and fails again).
    expect((await run(engine, broken)).error?.code).toBe('encoder_failed');
    expect(model.encodeCalls.filter((i) => i === bad.input).length).toBe(2);
  });

  it('an encoder output that does not match the span fails that request', async () => {
    const { engine } = vlm();
    const p = imagePrompt(['x ', small], true);
    p.multimodal.images[0]!.input = fakeImage(22, 4, 8).input; // encodes to 8 tokens, span is 4
    const r = await run(engine, p);
    expect(r.error?.message).toMatch(/8 tokens but the prompt has 4 placeholder tokens/);
  });

  it('cancel during an encode frees the request state; others carry on', async () => {
    const { engine, model } = vlm({ ...QWEN, vision: { mrope: true, encodeMs: 30 } });
    const p = imagePrompt(['to cancel ', big, ' ...'], true);
    const h = engine.submit({ promptIds: p.promptIds, multimodal: p.multimodal, params: params({ maxTokens: 50 }) });
    const c = collect(h);
    const text = bytes('meanwhile, text');
    const ct = collect(engine.submit({ promptIds: text, params: params({ maxTokens: 12 }) }));
    while (model.encodeCalls.length === 0) await sleep(1);
    h.abort();
    const [r, rt] = await Promise.all([c, ct]);
    expect(r.done?.finishReason).toBe('abort');
    expect(rt.tokens).toEqual(model.greedy(text, 12));
    expect(engine.stats().kv.usedBlocks).toBe(0);
    expect(engine.stats().running + engine.stats().waiting).toBe(0);
    // The aborted request never reached a step with its image.
    expect(model.plans.flatMap((pl) => pl.rows).some((row) => row.embeds)).toBe(false);
  });

  it('an encode that hangs trips the watchdog: everyone fails with a clear error, then the engine recovers', async () => {
    let stall = true;
    const { engine, model } = vlm(QWEN, {
      stepTimeoutMs: 50,
      faults: { encode: () => (stall ? sleep(300) : undefined) },
    });
    const p = imagePrompt(['hang ', small], true);
    const r = await run(engine, p);
    expect(r.error?.code).toBe('watchdog');
    expect(r.error?.message).toMatch(/an image encode .* did not return within 50 ms/);
    expect(engine.health().ok).toBe(false);
    while (!engine.health().ok) await sleep(10);
    stall = false;
    const again = await run(engine, p);
    expect(again.tokens).toEqual(model.greedyMultimodal(p.promptIds, p.multimodal, 12));
    expect(engine.stats().kv.usedBlocks).toBe(0);
  });

  it('preemption recomputes image requests exactly (positions and embeddings come back)', async () => {
    const fake: FakeModelOptions = { ...QWEN, numBlocks: 14, blockSize: 4, vision: { mrope: true } };
    const { engine, model } = vlm(fake, { encoderCacheBytes: 0, enablePrefixCache: false });
    const ps = [imagePrompt(['p1 ', big], true), imagePrompt(['p2 ', small, ' x'], true), imagePrompt(['p3 ', other, ' yy'], true)];
    const rs = await Promise.all(ps.map((p) => run(engine, p, 16)));
    expect(engine.stats().preemptions).toBeGreaterThan(0);
    rs.forEach((r, i) => expect(r.tokens).toEqual(model.greedyMultimodal(ps[i]!.promptIds, ps[i]!.multimodal, 16)));
  });

  it('Gemma 3 style (1-D positions): image spans go as bidirectional blocks', async () => {
    const fake: FakeModelOptions = { ...QWEN, vision: {} };
    const { engine, model } = vlm(fake, { maxBatchedTokens: 8 });
    const p = imagePrompt(['look ', small, ' and ', big, ' now'], false, true);
    const r = await run(engine, p);
    expect(r.tokens).toEqual(model.greedyMultimodal(p.promptIds, p.multimodal, 12));
    expect(model.greedyMultimodal(p.promptIds, { ...p.multimodal, bidirectional: false }, 12)).not.toEqual(r.tokens);
    const rows = model.plans.flatMap((pl) => pl.rows).filter((row) => row.embeds);
    for (const row of rows) {
      const o = row.embeds!.offsets;
      expect(row.bidirectional).toBeDefined();
      const covered = new Set<number>();
      for (let k = 0; k < row.bidirectional!.length; k += 2) for (let i = row.bidirectional![k]!; i < row.bidirectional![k + 1]!; i++) covered.add(i);
      expect([...covered].sort((x, y) => x - y)).toEqual([...o]);
    }
  });

  it('Qwen3-VL style DeepStack features are sliced with their rows', async () => {
    const fake: FakeModelOptions = { ...QWEN, vision: { mrope: true, deepstackLayers: 2 } };
    const { engine, model } = vlm(fake, { maxBatchedTokens: 8 });
    const p = imagePrompt(['ds ', small, ' mid ', big, ' end'], true);
    const r = await run(engine, p);
    expect(r.error).toBeUndefined();
    expect(r.tokens).toEqual(model.greedyMultimodal(p.promptIds, p.multimodal, 12));
  });

  it('refuses images for a model without a vision tower, and spans that do not fit the prompt', () => {
    const { engine } = makeEngine();
    const p = imagePrompt(['x ', small], false);
    expect(() => engine.submit({ promptIds: p.promptIds, multimodal: p.multimodal, params: params() })).toThrow(/does not accept images/);
    const { engine: v } = vlm();
    const q = imagePrompt(['x ', small], true);
    q.multimodal.images[0]!.offset = q.promptIds.length - 2;
    expect(() => v.submit({ promptIds: q.promptIds, multimodal: q.multimodal, params: params() })).toThrow(/does not fit/);
    const r = imagePrompt(['x ', small], true);
    delete r.multimodal.positions;
    expect(() => v.submit({ promptIds: r.promptIds, multimodal: r.multimodal, params: params() })).toThrow(/3-axis positions/);
  });
});

describe('engine: batched image encodes (batchImageEncodes)', () => {
  const a = fakeImage(41, 8, 6);
  const b = fakeImage(42, 4, 4);
  const c = fakeImage(43, 6, 4);
  const batching = (fake: FakeModelOptions = QWEN, opts: Partial<EngineOptions> = {}) =>
    vlm(fake, { maxBatchedTokens: 256, batchImageEncodes: true, enablePrefixCache: false, ...opts });

  it('the images of one step go in one encodeImages call; every request gets its solo output', async () => {
    const { engine, model } = batching();
    const p1 = imagePrompt(['one ', a, ' and ', b, ' ?'], true);
    const p2 = imagePrompt(['two ', c, ' !'], true);
    const p3 = imagePrompt(['three, same image as one: ', b, ' .'], true);
    const rs = await Promise.all([run(engine, p1), run(engine, p2), run(engine, p3)]);
    for (const [r, p] of [[rs[0]!, p1], [rs[1]!, p2], [rs[2]!, p3]] as const) {
      expect(r.error).toBeUndefined();
      expect(r.tokens).toEqual(model.greedyMultimodal(p.promptIds, p.multimodal, 12));
    }
    expect(model.batchCalls.length).toBe(1);
    expect(model.batchCalls[0]!.map((i) => i.pixels)).toEqual([a.input.pixels, b.input.pixels, c.input.pixels]); // b once
    expect(model.encodeCalls.length).toBe(0);
    expect(engine.stats().encoderCache).toMatchObject({ misses: 3, entries: 3 });
    // Cached now: a resent image encodes nothing.
    const again = await run(engine, imagePrompt(['again ', c, ' ?'], true));
    expect(again.error).toBeUndefined();
    expect(model.batchCalls.length + model.encodeCalls.length).toBe(1);
  });

  it('a bad image in a batch fails only its request: the batch is redone one image at a time', async () => {
    const bad = fakeImage(99, 4, 4);
    const fake: FakeModelOptions = { ...QWEN, vision: { mrope: true, encodeMs: 2, failOn: (i) => i.pixels === bad.input.pixels } };
    const { engine, model } = batching(fake);
    const good1 = imagePrompt(['fine ', a, ' ok'], true);
    const broken = imagePrompt(['broken ', b, ' and ', bad, ' ?'], true);
    const good2 = imagePrompt(['also fine ', c, ' ok'], true);
    const text = bytes('a text request alongside');
    const [r1, rb, r2, rt] = await Promise.all([
      run(engine, good1),
      run(engine, broken),
      run(engine, good2),
      collect(engine.submit({ promptIds: text, params: params({ maxTokens: 12 }) })),
    ]);
    expect(model.batchCalls.length).toBe(1);
    expect(model.batchCalls[0]!.length).toBe(4);
    expect(model.encodeCalls.length).toBe(4); // the fallback: each image alone, once
    expect(rb.error?.code).toBe('encoder_failed');
    expect(rb.error?.message).toMatch(/image encoder failed for image 1.*fake vision tower/);
    expect(r1.tokens).toEqual(model.greedyMultimodal(good1.promptIds, good1.multimodal, 12));
    expect(r2.tokens).toEqual(model.greedyMultimodal(good2.promptIds, good2.multimodal, 12));
    expect(rt.tokens).toEqual(model.greedy(text, 12));
    expect(engine.health().ok).toBe(true);
    expect(engine.stats().kv.usedBlocks).toBe(0);
    // The good images of the failed batch are cached; the bad one is not.
    expect(engine.stats().encoderCache).toMatchObject({ entries: 3 });
  });

  it('lookahead: images of requests the step cannot fit yet join its batch, up to half the encoder cache', async () => {
    const imgs = [fakeImage(51, 8, 8), fakeImage(52, 8, 8), fakeImage(53, 8, 8), fakeImage(54, 8, 8)]; // 16 tokens each
    const prompts = imgs.map((im, i) => imagePrompt([`request ${i}: `, im, ' ?'], true));
    // A 24-token budget fits one image request a step: without lookahead every image would go alone.
    const { engine, model } = batching(QWEN, { maxBatchedTokens: 24 });
    const rs = await Promise.all(prompts.map((p) => run(engine, p)));
    rs.forEach((r, i) => expect(r.tokens, `request ${i}`).toEqual(model.greedyMultimodal(prompts[i]!.promptIds, prompts[i]!.multimodal, 12)));
    expect(model.batchCalls.length).toBe(1);
    expect(model.batchCalls[0]!.map((x) => x.pixels)).toEqual(imgs.map((im) => im.input.pixels));
    expect(model.encodeCalls.length).toBe(0);
    // Room for two images' embeddings in half the cache: batches of the step's image and one more.
    const perImage = embeddingBytes(fakeImageEmbedding(imgs[0]!));
    const small = batching(QWEN, { maxBatchedTokens: 24, encoderCacheBytes: perImage * 4.5 });
    const rs2 = await Promise.all(prompts.map((p) => run(small.engine, p)));
    rs2.forEach((r, i) => expect(r.tokens).toEqual(small.model.greedyMultimodal(prompts[i]!.promptIds, prompts[i]!.multimodal, 12)));
    expect(small.model.batchCalls.map((x) => x.length)).toEqual([2, 2]);
  });

  it('a batched encode that hangs trips the watchdog; the engine waits for it, then recovers', async () => {
    let stall = true;
    const { engine, model } = batching(QWEN, { stepTimeoutMs: 50, faults: { encode: () => (stall ? sleep(300) : undefined) } });
    const p1 = imagePrompt(['hang ', a, ' ?'], true);
    const p2 = imagePrompt(['and ', b, ' ?'], true);
    const [r1, r2] = await Promise.all([run(engine, p1), run(engine, p2)]);
    expect(r1.error?.code).toBe('watchdog');
    expect(r2.error?.code).toBe('watchdog');
    expect(engine.health().ok).toBe(false);
    while (!engine.health().ok) await sleep(10);
    stall = false;
    const again = await run(engine, p1);
    expect(again.tokens).toEqual(model.greedyMultimodal(p1.promptIds, p1.multimodal, 12));
    expect(engine.stats().kv.usedBlocks).toBe(0);
  });

  it('off on a CPU model by default: one encodeImage per image', async () => {
    const { engine, model } = vlm(QWEN, { maxBatchedTokens: 256 });
    const p1 = imagePrompt(['one ', a, ' and ', b, ' ?'], true);
    const r = await run(engine, p1);
    expect(r.error).toBeUndefined();
    expect(model.batchCalls.length).toBe(0);
    expect(model.encodeCalls.length).toBe(2);
  });
});

function fakeImageEmbedding(img: ReturnType<typeof fakeImage>) {
  const [, h, w] = img.input.grid;
  return { tokens: (h * w) / 4, embeddings: new Float32Array(((h * w) / 4) * 8), ms: 0 };
}
