// Native failures surface as JS errors with clear messages (never a crash): bad checkpoints, unknown
// architectures, unsupported quantization, malformed plans and rows, concurrent and closed use.
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { NativeStepRow } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { FIXTURE_ROOT, loadFixture, maxAbsDiff, refRow } from '../helpers/fixtures.js';
import { GREEDY, runSequences } from '../helpers/runner.js';
import { readSafetensors, writeSafetensors } from '../helpers/safetensors.js';

const temps: string[] = [];
afterAll(() => {
  for (const t of temps) rmSync(t, { recursive: true, force: true });
});

/** Copies a fixture dir to a temp dir, optionally editing config.json. */
function copyFixture(name: string, edit?: (cfg: Record<string, unknown>) => void): string {
  const dst = mkdtempSync(join(tmpdir(), `rapid-${name}-`));
  temps.push(dst);
  const src = join(FIXTURE_ROOT, name);
  for (const f of readdirSync(src)) copyFileSync(join(src, f), join(dst, f));
  if (edit) {
    const cfg = JSON.parse(readFileSync(join(dst, 'config.json'), 'utf8')) as Record<string, unknown>;
    edit(cfg);
    writeFileSync(join(dst, 'config.json'), JSON.stringify(cfg, null, 2));
  }
  return dst;
}

/** Rewrites model.safetensors without the named tensor (valid file, one tensor fewer). */
function dropTensor(dir: string, tensor: string): void {
  const path = join(dir, 'model.safetensors');
  const t = readSafetensors(path);
  t.delete(tensor);
  writeSafetensors(path, t);
}

describe('checkpoint and config errors', () => {
  it('unknown architecture names it and lists the supported ones', () => {
    const dir = copyFixture('qwen2-f32', (c) => { c.architectures = ['FooBarForCausalLM']; });
    expect(() => addon().loadModel(dir, {})).toThrow(/unsupported architecture "FooBarForCausalLM".*Qwen2ForCausalLM.*Gemma3ForConditionalGeneration/);
  });

  it('missing tensor names the tensor', () => {
    const dir = copyFixture('qwen2-f32');
    dropTensor(dir, 'model.layers.1.self_attn.k_proj.bias');
    expect(() => addon().loadModel(dir, {})).toThrow(/model\.layers\.1\.self_attn\.k_proj\.bias/);
  });

  it('unsupported quantization mode names the module and the mode', () => {
    const dir = copyFixture('qwen2-q4', (c) => {
      for (const k of ['quantization', 'quantization_config']) (c[k] as Record<string, unknown>).mode = 'nvfp4';
    });
    expect(() => addon().loadModel(dir, {})).toThrow(/nvfp4/);
  });

  it('unsupported bits name the module', () => {
    const dir = copyFixture('qwen2-q4', (c) => {
      for (const k of ['quantization', 'quantization_config']) (c[k] as Record<string, unknown>).bits = 7;
    });
    expect(() => addon().loadModel(dir, {})).toThrow(/model\.\S+.*7|7.*model\.\S+/);
  });

  it('truncated safetensors → clear error from inspectCheckpoint and loadModel', () => {
    const dir = copyFixture('qwen2-f32');
    const path = join(dir, 'model.safetensors');
    const buf = readFileSync(path);
    writeFileSync(path, buf.subarray(0, Math.floor(buf.length / 2)));
    expect(() => addon().inspectCheckpoint(dir)).toThrow(/model\.safetensors/);
    expect(() => addon().loadModel(dir, {})).toThrow(/model\.safetensors/);
  });

  it('bad safetensors header → clear error', () => {
    const dir = copyFixture('qwen2-f32');
    const path = join(dir, 'model.safetensors');
    const buf = Buffer.from(readFileSync(path));
    buf.write('{"oops', 8, 'utf8'); // header no longer parses as JSON
    writeFileSync(path, buf);
    expect(() => addon().inspectCheckpoint(dir)).toThrow(/model\.safetensors/);
    const tiny = copyFixture('qwen2-f32');
    writeFileSync(join(tiny, 'model.safetensors'), Buffer.from([1, 2, 3]));
    expect(() => addon().inspectCheckpoint(tiny)).toThrow(/model\.safetensors/);
    const huge = copyFixture('qwen2-f32');
    const h = Buffer.alloc(16);
    h.writeBigUInt64LE(1n << 40n);
    writeFileSync(join(huge, 'model.safetensors'), h);
    expect(() => addon().inspectCheckpoint(huge)).toThrow(/model\.safetensors/);
  });

  it('inspectCheckpoint lists tensors of a good checkpoint', () => {
    const t = addon().inspectCheckpoint(join(FIXTURE_ROOT, 'qwen2-q4'));
    const w = t.find((x) => x.name === 'model.layers.0.self_attn.q_proj.weight')!;
    expect(w.dtype).toBe('U32');
    expect(w.shape).toEqual([128, 16]);
    expect(w.file).toMatch(/model\.safetensors$/);
  });
});

// Defence in depth: these configs reach the addon directly (no TypeScript validation in front). Before the
// loaders checked what they divide by, num_attention_heads 0 killed the process with SIGFPE, and a negative
// layer count leaked "cannot create std::vector larger than max_size()".
describe('native loaders check sizes before dividing or allocating', () => {
  const copyAny = (rel: string, edit: (cfg: Record<string, unknown>) => void): string => {
    const dst = mkdtempSync(join(tmpdir(), 'rapid-native-cfg-'));
    temps.push(dst);
    const src = join(FIXTURE_ROOT, '..', rel);
    for (const f of readdirSync(src)) copyFileSync(join(src, f), join(dst, f));
    const cfg = JSON.parse(readFileSync(join(dst, 'config.json'), 'utf8')) as Record<string, unknown>;
    edit(cfg);
    writeFileSync(join(dst, 'config.json'), JSON.stringify(cfg));
    return dst;
  };
  const vision = (c: Record<string, unknown>): Record<string, unknown> => c.vision_config as Record<string, unknown>;
  const cases: [string, string, (c: Record<string, unknown>) => void, RegExp][] = [
    ['num_attention_heads 0', 'models/qwen2-f32', (c) => { c.num_attention_heads = 0; }, /num_attention_heads is 0/],
    ['negative layers', 'models/gemma3-q4', (c) => { c.num_hidden_layers = -3; delete c.layer_types; }, /num_hidden_layers is -3/],
    ['hidden_size 0', 'models/llama-f32', (c) => { c.hidden_size = 0; }, /hidden_size is 0/],
    ['head_dim 0', 'models/qwen3-f32', (c) => { c.head_dim = 0; }, /head_dim is 0/],
    ['sliding_window_pattern 0', 'models/gemma3-f32', (c) => { c.sliding_window_pattern = 0; delete c.layer_types; }, /sliding_window_pattern/],
    ['vision num_key_value_heads 0', 'vlm/gemma4-moe-q4', (c) => { vision(c).num_key_value_heads = 0; }, /vision num_key_value_heads is 0/],
    ['vision patch_size 0', 'vlm/qwen2_5_vl-q4', (c) => { vision(c).patch_size = 0; }, /vision patch_size is 0/],
    ['vision spatial_merge_size -2', 'vlm/qwen3_vl-q4', (c) => { vision(c).spatial_merge_size = -2; }, /vision spatial_merge_size is -2/],
    ['vision heads 0', 'vlm/gemma3-q4', (c) => { vision(c).num_attention_heads = 0; }, /vision num_attention_heads is 0/],
  ];
  for (const [name, rel, edit, message] of cases)
    it(`${name}: a readable error, not a signal`, () => {
      expect(() => addon().loadModel(copyAny(rel, edit), { threads: 1, kvCacheBytes: 1 << 20 })).toThrow(message);
    });

  it('a KV cache larger than memory is a readable error, not std::bad_alloc', () => {
    expect(() => addon().loadModel(join(FIXTURE_ROOT, 'qwen2-f32'), { threads: 1, kvCacheBytes: 2 ** 40 })).toThrow(/^KV pool: cannot allocate \d+ bytes$/);
  });
});

describe('step plan errors', () => {
  const fx = loadFixture('qwen2-f32');
  const ids = fx.ref.prompts[0]!.ids;
  const row = (over: Partial<NativeStepRow>): NativeStepRow => ({
    requestId: 'r',
    tokens: Int32Array.from(ids),
    positions: Int32Array.from(ids, (_, i) => i),
    blockTable: Int32Array.from([0, 1]),
    contextLen: 0,
    sample: { ...GREEDY },
    ...over,
  });

  it('bad rows fail alone; good rows still run', async () => {
    const m = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 1 << 20 });
    try {
      const nb = m.info().numBlocks;
      const res = await m.step({
        rows: [
          row({ requestId: 'vocab', tokens: Int32Array.from([1, 99999]), positions: Int32Array.from([0, 1]), blockTable: Int32Array.from([2]) }),
          row({ requestId: 'short', blockTable: Int32Array.from([3]) }),
          row({ requestId: 'range', blockTable: Int32Array.from([4, nb]) }),
          row({ requestId: 'pos', positions: Int32Array.from([0, 1]), blockTable: Int32Array.from([5, 6]) }),
          row({ requestId: 'empty', tokens: new Int32Array(0), positions: new Int32Array(0), blockTable: Int32Array.from([7]) }),
          row({ requestId: 'ok', blockTable: Int32Array.from([8, 9]) }),
          row({ requestId: 'ok', blockTable: Int32Array.from([10, 11]) }),
          row({ requestId: 'clash', blockTable: Int32Array.from([8, 12]) }),
          row({ requestId: 'temp', blockTable: Int32Array.from([13, 14]), sample: { ...GREEDY, temperature: -1 } }),
          row({ requestId: 'mask', blockTable: Int32Array.from([15, 16]), sample: { ...GREEDY, bitmask: new Int32Array(3) } }),
          row({ requestId: 'negpos', blockTable: Int32Array.from([17, 18]), positions: Int32Array.from(ids, (_, i) => i - 1) }),
        ],
      });
      const err = (i: number) => res.rows[i]!.error ?? '';
      expect(res.rows.map((r) => r.requestId)).toEqual(['vocab', 'short', 'range', 'pos', 'empty', 'ok', 'ok', 'clash', 'temp', 'mask', 'negpos']);
      expect(err(0)).toMatch(/token id 99999 is outside the vocabulary/);
      expect(err(1)).toMatch(/blockTable has 1 blocks/);
      expect(err(2)).toMatch(new RegExp(`block id ${nb} is outside the KV pool`));
      expect(err(3)).toMatch(/positions has 2 entries/);
      expect(err(4)).toMatch(/no tokens/);
      expect(res.rows[5]!.error).toBeUndefined();
      expect(res.rows[5]!.token).toBe(fx.ref.prompts[0]!.greedy[0]);
      expect(err(6)).toMatch(/duplicate requestId/);
      expect(err(7)).toMatch(/KV block 8 is written by another row/);
      expect(err(8)).toMatch(/temperature/);
      expect(err(9)).toMatch(/bitmask has 3 words/);
      expect(err(10)).toMatch(/position -1 is negative/);
    } finally {
      m.close();
    }
  });

  it('malformed plans reject with a TypeError naming the field', async () => {
    const m = addon().loadModel(fx.dir, { threads: 1, kvCacheBytes: 1 << 20 });
    try {
      await expect(m.step({} as never)).rejects.toThrow(/plan\.rows must be an array/);
      await expect(m.step({ rows: [5 as never] })).rejects.toThrow(/rows\[0\] must be an object/);
      await expect(m.step({ rows: [{ ...row({}), requestId: 7 as never }] })).rejects.toThrow(/rows\[0\]\.requestId must be a string/);
      await expect(m.step({ rows: [row({ sample: { ...GREEDY, bitmask: 'pending' } })] })).rejects.toThrow(/pendingMasks/);
    } finally {
      m.close();
    }
  });

  it('a row with a malformed or out-of-range value fails alone, with a message naming it; its neighbour runs', async () => {
    const m = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 1 << 20 });
    try {
      // Each bad row beside a good one: the step resolves, only the bad row has an error.
      const cases: [Partial<NativeStepRow>, RegExp][] = [
        [{ tokens: [1, 2] as unknown as Int32Array }, /rows\[0\]\.tokens must be an Int32Array/],
        [{ sample: { ...GREEDY, seed: -1 } }, /seed must be an integer in \[0, 2\^53\)/],
        [{ sample: { ...GREEDY, seed: 2 ** 53 } }, /seed/],
        [{ sample: { ...GREEDY, counter: 1e300 } }, /counter/],
        [{ sample: { ...GREEDY, topK: 1e10 } }, /topK must be an integer in \[0, 2147483647\]/],
        [{ sample: { ...GREEDY, topK: 0.5 } }, /topK/],
        [{ sample: { ...GREEDY, logprobs: 2.5 } }, /logprobs/],
        [{ sample: { ...GREEDY, temperature: Number.NaN } }, /temperature/],
        [{ sample: { ...GREEDY, temperature: 1e308 } }, /temperature/],
        [{ sample: { ...GREEDY, temperature: 1e-30 } }, /temperature must be 0 \(greedy\) or at least/],
        [{ sample: { ...GREEDY, topP: 1e-300 } }, /topP/],
        [{ sample: { ...GREEDY, minP: -0.5 } }, /minP/],
        [{ sample: { ...GREEDY, repetitionPenalty: 1e-300 } }, /repetitionPenalty/],
        [{ sample: { ...GREEDY, presencePenalty: -1e308 } }, /penalties must be finite/],
        [{ sample: { ...GREEDY, temperature: '1' as never } }, /temperature must be a number/],
        [{ sample: 'greedy' as never }, /sample must be an object/],
        [{ contextLen: 1e300 }, /contextLen must be an integer/],
        [{ embeds: 3 as never }, /embeds must be an object/],
      ];
      for (const [over, err] of cases) {
        const res = await m.step({ rows: [row({ requestId: 'bad', blockTable: Int32Array.from([0, 1]), ...over }), row({ requestId: 'ok', blockTable: Int32Array.from([2, 3]) })] });
        expect(res.rows[0]!.error, JSON.stringify(over)).toMatch(err);
        expect(res.rows[0]!.token).toBeUndefined();
        expect(res.rows[1]!.error).toBeUndefined();
        expect(res.rows[1]!.token).toBe(fx.ref.prompts[0]!.greedy[0]);
      }
      // Top-k at or above the vocabulary keeps every token: the same draw as top-k off.
      const draw = async (topK: number) =>
        (await m.step({ rows: [row({ sample: { ...GREEDY, temperature: 0.9, seed: 11, topK } })] })).rows[0]!.token;
      const off = await draw(0);
      expect(await draw(m.info().vocabSize)).toBe(off);
      expect(await draw(2 ** 31 - 1)).toBe(off);
    } finally {
      m.close();
    }
  });

  it('a second concurrent step rejects clearly; the first still resolves; closed models reject', async () => {
    const m = addon().loadModel(fx.dir, { threads: 1, kvCacheBytes: 1 << 20 });
    const first = m.step({ rows: [row({})] });
    await expect(m.step({ rows: [row({ requestId: 'x', blockTable: Int32Array.from([5, 6]) })] })).rejects.toThrow(/already in flight/);
    const r = await first;
    expect(r.rows[0]!.token).toBe(fx.ref.prompts[0]!.greedy[0]);
    expect(r.timings.tokens).toBe(ids.length);
    const again = await m.step({ rows: [row({ requestId: 'y', blockTable: Int32Array.from([7, 8]) })] });
    expect(again.rows[0]!.token).toBe(fx.ref.prompts[0]!.greedy[0]);
    m.close();
    await expect(m.step({ rows: [row({})] })).rejects.toThrow(/closed/);
    expect(() => m.info()).toThrow(/closed/);
  });

  it('close() during a step lets the step finish; an empty plan resolves empty', async () => {
    const m = addon().loadModel(fx.dir, { threads: 1, kvCacheBytes: 1 << 20 });
    const empty = await m.step({ rows: [] });
    expect(empty.rows).toEqual([]);
    expect(empty.timings.tokens).toBe(0);
    const p = m.step({ rows: [row({})] });
    m.close();
    expect((await p).rows[0]!.token).toBe(fx.ref.prompts[0]!.greedy[0]);
    await expect(m.step({ rows: [row({})] })).rejects.toThrow(/closed/);
  });

  it('bad load options and a tiny KV budget are errors', () => {
    expect(() => addon().loadModel(fx.dir, { precision: 'turbo' as never })).toThrow(/precision/);
    expect(() => addon().loadModel(fx.dir, { kvCacheBytes: 100 })).toThrow(/below one block/);
    expect(() => addon().loadModel(join(FIXTURE_ROOT, 'does-not-exist'), {})).toThrow(/does-not-exist/);
  });
});

describe('module functions', () => {
  it('convert writes MLX 4- and 8-bit checkpoints that load and generate', async () => {
    const fx = loadFixture('qwen2-f32');
    const pr = fx.ref.prompts[0]!;
    for (const bits of [4, 8]) {
      const dst = mkdtempSync(join(tmpdir(), `rapid-convert-${bits}-`));
      temps.push(dst);
      addon().convert(fx.dir, dst, { bits, groupSize: 64 });
      expect(addon().inspectCheckpoint(dst).map((t) => t.name)).toContain('model.layers.0.self_attn.q_proj.scales');
      const m = addon().loadModel(dst, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
      try {
        expect(m.info().quantization).toBe(`affine ${bits}-bit g64`);
        const out = (await runSequences(m, [{ id: 'a', prompt: pr.ids, maxTokens: 4, logitRows: 1 }])).get('a')!;
        expect(out.tokens).toHaveLength(4);
        // 8-bit stays close to the f32 model (the fixtures' own q8 differs by ~0.03·max|logit|);
        // 4-bit legitimately moves these tiny random models' logits a lot, so only shape is checked.
        if (bits === 8) expect(maxAbsDiff(out.logits[0]!, refRow(fx, 0, 0))).toBeLessThan(0.1 * pr.max_abs_logit);
      } finally {
        m.close();
      }
    }
    expect(() => addon().convert(fx.dir, join(tmpdir(), 'rapid-convert-never'), { bits: 7, groupSize: 64 })).toThrow(/bits/);
  });

  it('version, abi, systemInfo, memoryBandwidth', () => {
    const a = addon();
    expect(a.version).toMatch(/^\d+\.\d+\.\d+/);
    const s = a.systemInfo();
    expect(s.threads).toBeGreaterThan(0);
    expect(typeof s.kernel).toBe('string');
    expect(Array.isArray(s.simd)).toBe(true);
    expect(a.memoryBandwidth(8 << 20, 1)).toBeGreaterThan(1e8);
  });
});
