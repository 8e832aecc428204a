// One corrupt checkpoint of each kind the issue names, through every door a user takes: the library load
// (the error names the tensor or field and what was expected), the bare addon (no signal, no C++ internals),
// `rapid run` (exit 1, one stderr line, no stack trace), `rapid serve BAD` (startup error, exit 1), and a
// pool server whose POST /v1/models/{id}/load answers with the message while its other model keeps serving.
// Every text family and the VLM fixtures (f32 and q4, vision-tower tensors included) are covered.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { endpointOptionsFrom } from '../../src/app/start-server.js';
import { startServePool } from '../../src/cli/serve-pool.js';
import type { RunningPoolServer } from '../../src/app/pool-server.js';
import { nativeAvailable } from '../helpers/addon.js';
import { copyDir, editConfig, rewriteTensors, writeFresh, type Corruption } from './checkpoint-corruptions.js';
import { runCorruptions } from './run-corruptions.js';

const ROOT = resolve(import.meta.dirname, '..', 'fixtures');
const BIN = resolve(import.meta.dirname, '..', '..', 'bin', 'rapid.js');
const LEAKS = /vector::|std::|basic_string|bad_alloc|_M_|terminate called|Segmentation|\n\s+at /;

interface Case {
  name: string;
  fixture: string;
  apply(dir: string): void;
  /** What the error must say: the tensor or field, and what was expected. */
  message: RegExp;
}

const removeTensor = (file: string, name: string) => (dir: string) => rewriteTensors(join(dir, file), (m) => m.delete(name));
const reshapeTensor = (file: string, name: string, shape: number[]) => (dir: string) =>
  rewriteTensors(join(dir, file), (m) => {
    const t = m.get(name);
    if (!t) throw new Error(`no tensor ${name} in ${file}`);
    m.set(name, { ...t, shape });
  });
const retypeTensor = (file: string, name: string, dtype: string) => (dir: string) =>
  rewriteTensors(join(dir, file), (m) => {
    const t = m.get(name);
    if (!t) throw new Error(`no tensor ${name} in ${file}`);
    m.set(name, { ...t, dtype });
  });
const editIndex = (edit: (weightMap: Record<string, string>) => void) => (dir: string) => {
  const path = join(dir, 'model.safetensors.index.json');
  const index = JSON.parse(readFileSync(path, 'utf8')) as { weight_map: Record<string, string> };
  edit(index.weight_map);
  writeFresh(path, JSON.stringify(index, null, 2));
};
const ST = 'model.safetensors';

const CASES: Case[] = [
  {
    name: 'missing text tensor (qwen2 f32)',
    fixture: 'models/qwen2-f32',
    apply: removeTensor(ST, 'model.layers.1.self_attn.k_proj.weight'),
    message: /missing tensor model\.layers\.1\.self_attn\.k_proj\.weight \(expected \[64, 128\]/,
  },
  {
    name: 'missing vision-tower tensor (gemma3 VLM f32)',
    fixture: 'vlm/gemma3-f32',
    apply: removeTensor(ST, 'vision_tower.encoder.layers.1.layer_norm2.weight'),
    message: /missing tensor vision_tower\.encoder\.layers\.1\.layer_norm2\.weight/,
  },
  {
    name: 'missing quantized scales (qwen3 q4)',
    fixture: 'models/qwen3-q4',
    apply: removeTensor(ST, 'model.layers.0.mlp.up_proj.scales'),
    message: /missing tensor model\.layers\.0\.mlp\.up_proj\.scales: model\.layers\.0\.mlp\.up_proj\.weight holds U32 quantized codes/,
  },
  {
    name: 'vision patch embedding of the wrong shape (mistral3 VLM f32)',
    fixture: 'vlm/mistral3-f32',
    apply: reshapeTensor(ST, 'vision_tower.patch_conv.weight', [32, 3, 2, 8]),
    message: /tensor vision_tower\.patch_conv\.weight has shape \[32, 3, 2, 8\], expected \[32, 3, 4, 4\]/,
  },
  {
    name: 'vision linear of the wrong shape (qwen3-vl VLM q4)',
    fixture: 'vlm/qwen3_vl-q4',
    apply: reshapeTensor(ST, 'vision_tower.blocks.1.attn.qkv.weight', [32, 96]),
    message: /vision_tower\.blocks\.1\.attn\.qkv has shape \[32, 96\], expected \[96, 32\]/,
  },
  {
    name: 'text weight of the wrong dtype (llama q4, sharded)',
    fixture: 'models/llama-q4',
    apply: retypeTensor('model-00002-of-00002.safetensors', 'model.layers.1.input_layernorm.weight', 'I16'),
    message: /model\.layers\.1\.input_layernorm\.weight has dtype I16, expected F32, F16 or BF16/,
  },
  {
    name: 'vision weight of the wrong dtype (qwen2.5-vl VLM q4)',
    fixture: 'vlm/qwen2_5_vl-q4',
    apply: retypeTensor(ST, 'vision_tower.blocks.1.mlp.down_proj.weight', 'I16'),
    message: /vision_tower\.blocks\.1\.mlp\.down_proj\.weight has dtype I16, expected/,
  },
  {
    name: 'unknown quantization mode (gemma3 q4)',
    fixture: 'models/gemma3-q4',
    apply: (dir) => editConfig(dir, 'quantization.mode', 'nvfp4'),
    message: /quantization\.mode is "nvfp4": supported: affine/,
  },
  {
    name: 'unknown quantization bits (gemma4 VLM q4)',
    fixture: 'vlm/gemma4-e-q4',
    apply: (dir) => editConfig(dir, 'quantization.bits', 7),
    message: /quantization\.bits is 7: supported: 2, 3, 4, 5, 6, 8/,
  },
  {
    name: 'unknown quantization group size (qwen3-vl-moe VLM q4)',
    fixture: 'vlm/qwen3_vl_moe-q4',
    apply: (dir) => editConfig(dir, 'quantization.group_size', 48),
    message: /quantization\.group_size is 48: supported: 32, 64, 128/,
  },
  {
    name: 'a family rapid does not know (model_type and architectures)',
    fixture: 'models/llama-f32',
    apply: (dir) => {
      editConfig(dir, 'architectures', ['FooBarForCausalLM']);
      editConfig(dir, 'model_type', 'foobar');
    },
    message: /unsupported architecture "FooBarForCausalLM" \(supported: Qwen2ForCausalLM, /,
  },
  {
    name: 'a required field missing (qwen2 hidden_size)',
    fixture: 'models/qwen2-f32',
    apply: (dir) => editConfig(dir, 'hidden_size', undefined, true),
    message: /config\.json: hidden_size is missing \(expected an integer/,
  },
  {
    name: 'a required field of the wrong type (qwen2.5-vl vision hidden_size as a string)',
    fixture: 'vlm/qwen2_5_vl-f32',
    apply: (dir) => editConfig(dir, 'vision_config.hidden_size', '32'),
    message: /vision_config\.hidden_size is "32": expected an integer/,
  },
  {
    name: 'a truncated safetensors file (gemma4 MoE VLM f32)',
    fixture: 'vlm/gemma4-moe-f32',
    apply: (dir) => {
      const buf = readFileSync(join(dir, ST));
      writeFresh(join(dir, ST), buf.subarray(0, Math.floor(buf.length * 0.6)));
    },
    message: /model\.safetensors: tensor \S+: data_offsets \[\d+, \d+\] point past the end of the data \(\d+ bytes\): truncated file\?/,
  },
  {
    name: 'a header that lies about offsets (qwen3-vl-moe VLM f32)',
    fixture: 'vlm/qwen3_vl_moe-f32',
    apply: (dir) => {
      const buf = readFileSync(join(dir, ST));
      const hlen = Number(buf.readBigUInt64LE(0));
      const header = JSON.parse(buf.subarray(8, 8 + hlen).toString('utf8')) as Record<string, { data_offsets?: [number, number] }>;
      const t = header['model.visual.blocks.1.attn.qkv.weight'];
      if (!t?.data_offsets) throw new Error('fixture changed: no model.visual.blocks.1.attn.qkv.weight');
      t.data_offsets = [t.data_offsets[0] + 4, t.data_offsets[1] + 4]; // overlaps its neighbour
      const h = Buffer.from(JSON.stringify(header).padEnd(hlen, ' '), 'utf8');
      if (h.length !== hlen) throw new Error('header grew');
      writeFresh(join(dir, ST), Buffer.concat([buf.subarray(0, 8), h, buf.subarray(8 + hlen)]));
    },
    message: /model\.safetensors: tensors model\.visual\.blocks\.1\.attn\.qkv\.weight and \S+ overlap/,
  },
  {
    name: 'a shard index naming a missing file (llama q4)',
    fixture: 'models/llama-q4',
    apply: editIndex((wm) => {
      wm['model.layers.0.mlp.up_proj.weight'] = 'model-00003-of-00003.safetensors';
    }),
    // The library names the tensor; the CLI stops earlier, at the missing file.
    message: /model\.safetensors\.index\.json: shard "model-00003-of-00003\.safetensors" of tensor model\.layers\.0\.mlp\.up_proj\.weight does not exist|lacks model-00003-of-00003\.safetensors \(named in model\.safetensors\.index\.json\)/,
  },
  {
    name: 'a shard index naming a tensor its shard lacks (llama f32)',
    fixture: 'models/llama-f32',
    apply: editIndex((wm) => {
      wm['model.layers.0.mlp.up_proj.weight'] = wm['model.layers.0.mlp.up_proj.weight'] === 'model-00001-of-00002.safetensors' ? 'model-00002-of-00002.safetensors' : 'model-00001-of-00002.safetensors';
    }),
    message: /tensor model\.layers\.0\.mlp\.up_proj\.weight is listed in model\.safetensors\.index\.json under model-0000\d-of-00002\.safetensors but is not in that file/,
  },
];

const corruptions: Corruption[] = CASES.map((c) => ({ id: c.name, fixture: c.fixture, cls: 'door', target: c.name, apply: c.apply }));

describe('corrupt checkpoints: library and addon', () => {
  it('the library load fails with an error naming the tensor or field and what was expected', { timeout: 120_000 }, async () => {
    const results = await runCorruptions(corruptions, (f) => join(ROOT, f), 'library');
    const got = results.map((r, i) => ({ name: CASES[i]!.name, outcome: r.outcome, message: r.message ?? r.signal ?? '' }));
    for (const [i, g] of got.entries()) {
      expect(g.outcome, `${g.name}: ${g.message}`).toBe('error');
      expect(g.message, g.name).toMatch(CASES[i]!.message);
      expect(g.message, g.name).not.toMatch(LEAKS);
    }
  });

  it('the bare addon (no validation in front) never signals, hangs or leaks C++ library messages', { timeout: 120_000 }, async () => {
    const results = await runCorruptions(corruptions, (f) => join(ROOT, f), 'native');
    for (const r of results) {
      expect(['error', 'loaded'], `${r.c.id}: ${r.outcome} ${r.signal ?? ''}`).toContain(r.outcome);
      expect(r.message ?? '', r.c.id).not.toMatch(LEAKS);
    }
  });
});

/** Each case applied to its own copy of the fixture, for the doors that take a directory. */
function materialize(root: string): string[] {
  return CASES.map((c, i) => {
    const dir = join(root, String(i));
    copyDir(join(ROOT, c.fixture), dir);
    c.apply(dir);
    return dir;
  });
}

function rapid(args: string[]): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string; stdout: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
    let stderr = '';
    let stdout = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000); // a hang fails as a signal
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      done({ code, signal, stderr, stdout });
    });
  });
}

describe.skipIf(!nativeAvailable())('corrupt checkpoints: CLI and server', () => {
  let tmp: string;
  let dirs: string[];
  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), 'rapid-badckpt-'));
    dirs = materialize(tmp);
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  const clean = (name: string, r: Awaited<ReturnType<typeof rapid>>, message: RegExp): void => {
    expect(r.signal, name).toBeNull();
    expect(r.code, `${name}: ${r.stderr}`).toBe(1);
    const lines = r.stderr.trim().split('\n').filter((l) => !l.startsWith('[rapid] ')); // progress lines
    expect(lines, name).toHaveLength(1);
    expect(lines[0], name).toMatch(message);
    expect(r.stderr, name).not.toMatch(LEAKS);
  };

  it('rapid run exits 1 with one stderr line naming what is wrong', { timeout: 600_000 }, async () => {
    for (const [i, c] of CASES.entries()) clean(c.name, await rapid(['run', dirs[i]!, '--prompt', 'hi', '--max-tokens', '1']), c.message);
  });

  it('rapid serve BAD fails at startup with the message and exits 1', { timeout: 600_000 }, async () => {
    for (const [i, c] of CASES.entries()) clean(c.name, await rapid(['serve', dirs[i]!, '--port', '0']), c.message);
  });

  describe('a pool server', () => {
    let srv: RunningPoolServer;
    const good = join(ROOT, 'models', 'qwen3-f32');
    const opts = endpointOptionsFrom({ threads: 1, precision: 'exact', kvCacheMemory: 4 << 20, blockSize: 16, maxNumSeqs: 4 });
    beforeAll(async () => {
      const specs = [{ spec: good, dir: good, names: ['good'], pin: true, options: opts }, ...dirs.map((d, i) => ({ spec: d, dir: d, names: [`bad-${i}`], pin: false, options: opts }))];
      srv = await startServePool(specs, { port: 0, modelLoadTimeout: 60 });
    }, 60_000);
    afterAll(async () => {
      await srv?.close(1000);
    });

    const post = (path: string, body?: unknown) =>
      fetch(`${srv.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
    const chatGood = async (): Promise<number> => (await post('/v1/chat/completions', { model: 'good', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })).status;

    it('POST /v1/models/{id}/load of a corrupt model answers with the message; the other model keeps serving', { timeout: 300_000 }, async () => {
      for (const [i, c] of CASES.entries()) {
        const r = await post(`/v1/models/bad-${i}/load`);
        const e = (await r.json()) as { error: { message: string; code: string } };
        expect(r.status, c.name).toBe(500);
        expect(e.error.code, c.name).toBe('model_load_failed');
        expect(e.error.message, c.name).toMatch(new RegExp(`the model 'bad-${i}' failed to load: `));
        expect(e.error.message, c.name).toMatch(c.message);
        expect(e.error.message, c.name).not.toMatch(LEAKS);
        expect(await chatGood(), c.name).toBe(200);
      }
    });

    it('a hot swap to a corrupt checkpoint is refused as the request\'s error and keeps the old model', { timeout: 120_000 }, async () => {
      const c = CASES[0]!;
      const r = await post('/v1/models/good/load', { spec: dirs[0] });
      const e = (await r.json()) as { error: { message: string; code: string; param: string | null } };
      expect(r.status).toBe(400);
      expect(e.error).toMatchObject({ code: 'invalid_spec', param: 'spec' });
      expect(e.error.message).toMatch(c.message);
      expect(await chatGood()).toBe(200);
    });
  });
});
