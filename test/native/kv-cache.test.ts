// The KV cache's element types (--kv-cache-dtype, docs/kv-cache.md), on the real addon and fixtures:
// - the native suite (native/test/kv_cache_test.cpp): store/load round-trip bounds, F16C == portable,
//   attention over a 16-bit/int8 pool bit-identical to f32 attention over the same rounded values;
// - parity per dtype under exact precision (f32 activations, so the KV type is the only change):
//   logits vs transformers within the stated tolerance, greedy agreement reported (the table in the docs);
// - batch invariance and prefix-cache exactness per dtype; capacity per dtype; the defaults.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command, type CommanderError } from 'commander';
import { afterAll, describe, expect, it } from 'vitest';
import { registerBench } from '../../src/cli/commands/bench.js';
import { registerChat } from '../../src/cli/commands/chat.js';
import { registerRun } from '../../src/cli/commands/run.js';
import { registerServe, startServer } from '../../src/cli/commands/serve.js';
import type { KvCacheDtype, NativeModel } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { fixtureNames, loadFixture, maxAbsDiff, refRow } from '../helpers/fixtures.js';
import { buildAndRunNativeSuite, buildNativeSuite, hasCompiler, nativeSources, NATIVE_SRC, runNativeSuite } from '../helpers/native-suite.js';
import { BlockAllocator, GREEDY, runSequences } from '../helpers/runner.js';

const DTYPES: readonly KvCacheDtype[] = ['f32', 'f16', 'bf16', 'int8'];
// max |logit diff| / max(1, max|logit|) vs transformers, exact precision. f32 is the parity suite's 1e-3;
// the others are the measured worst over these fixtures (docs/kv-cache.md) with about 2x headroom.
const TOL: Record<KvCacheDtype, number> = { f32: 1e-3, f16: 3e-3, bf16: 2e-2, int8: 4e-2 };
const dense = fixtureNames().filter((n) => n.endsWith('-f32') && !n.includes('embedding'));
const report: string[] = [];

afterAll(() => {
  if (report.length) console.log(`KV dtype parity (exact precision):\n${report.join('\n')}`);
});

const suiteSources = () => [
  ...nativeSources('kv'),
  ...['attention.cpp', 'attention_tile.cpp', 'vec_math.cpp'].map((f) => join(NATIVE_SRC, 'layers', f)),
  join(NATIVE_SRC, 'cpu', 'threadpool.cpp'),
];
const ARM64_CXX = 'aarch64-linux-gnu-g++';
const hasArm64 = spawnSync(ARM64_CXX, ['--version']).status === 0 && spawnSync('qemu-aarch64', ['--version']).status === 0;

describe.skipIf(!hasCompiler)('KV conversion suite', () => {
  it('builds warning-free; round trips, F16C, attention equivalence hold', () => {
    buildAndRunNativeSuite('kv_cache_test', suiteSources());
  }, 240_000);

  // The portable loads arm64 uses (no NEON conversion yet), cross-compiled and run under qemu.
  it.skipIf(!hasArm64)('passes on arm64 (qemu)', () => {
    const work = mkdtempSync(join(tmpdir(), 'rapid-kv-arm64-'));
    try {
      runNativeSuite(buildNativeSuite('kv_cache_test', suiteSources(), work, ARM64_CXX), ['qemu-aarch64', '-L', '/usr/aarch64-linux-gnu']);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }, 300_000);
});

describe.each(dense)('%s', (name) => {
  const fx = loadFixture(name);
  it.each(DTYPES)('kv %s: logits match transformers within its tolerance (exact precision)', async (dtype) => {
    const model: NativeModel = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact', kvCacheDtype: dtype });
    try {
      expect(model.info().kvCacheDtype).toBe(dtype);
      let worst = 0;
      let agree = 0;
      let total = 0;
      for (let p = 0; p < fx.ref.prompts.length; p++) {
        const pr = fx.ref.prompts[p]!;
        const out = (await runSequences(model, [{ id: `p${p}`, prompt: pr.ids, maxTokens: pr.greedy.length, chunk: 7, logitRows: pr.logits_rows }])).get(`p${p}`)!;
        expect(out.errors).toEqual([]);
        const scale = Math.max(1, pr.max_abs_logit);
        for (let j = 0; j < out.logits.length; j++) {
          if (j > 0 && out.tokens[j - 1] !== pr.greedy[j - 1]) break; // comparable while the tokens agree
          const d = maxAbsDiff(out.logits[j]!, refRow(fx, p, j)) / scale;
          worst = Math.max(worst, d);
          expect(d, `prompt ${p} row ${j}`).toBeLessThanOrEqual(TOL[dtype]);
        }
        let k = 0;
        while (k < pr.greedy.length && out.tokens[k] === pr.greedy[k]) k++;
        agree += k;
        total += pr.greedy.length;
      }
      report.push(`| ${name} | ${dtype} | ${worst.toExponential(2)} | ${agree}/${total} |`);
      if (dtype === 'f32') expect(agree).toBe(total);
    } finally {
      model.close();
    }
  }, 120_000);
});

describe.each(['qwen3-f32', 'gemma3-q4'])('%s batch invariance per dtype', (name) => {
  const fx = loadFixture(name);
  const [a, b] = [fx.ref.prompts[0]!, fx.ref.prompts[1]!];
  it.each(DTYPES)('kv %s: tokens alone = batched, joining mid-stream, chunked; a shared prefix = a cold run', async (dtype) => {
    const model = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, kvCacheDtype: dtype });
    try {
      const run = async (specs: Parameters<typeof runSequences>[1]) => {
        const out = await runSequences(model, specs);
        for (const o of out.values()) expect(o.errors).toEqual([]);
        return out;
      };
      const soloA = (await run([{ id: 'a', prompt: a.ids, maxTokens: 16 }])).get('a')!.tokens;
      const soloB = (await run([{ id: 'b', prompt: b.ids, maxTokens: 16 }])).get('b')!.tokens;
      const both = await run([
        { id: 'a', prompt: a.ids, maxTokens: 16, chunk: 5 },
        { id: 'b', prompt: b.ids, maxTokens: 16, startStep: 3 },
      ]);
      expect(both.get('a')!.tokens).toEqual(soloA);
      expect(both.get('b')!.tokens).toEqual(soloB);

      // Prefix cache: B reads A's first two full blocks (written by A's prefill) instead of writing its own.
      const bs = model.info().blockSize;
      const long = fx.ref.prompts.reduce((x, y) => (y.ids.length > x.ids.length ? y : x)).ids;
      expect(long.length).toBeGreaterThan(2 * bs);
      const prefix = long.slice(0, 2 * bs);
      const suffix = b.ids.slice(0, 9);
      const alloc = new BlockAllocator(bs, model.info().numBlocks);
      const cold = (await runSequences(model, [{ id: 'cold', prompt: [...prefix, ...suffix], maxTokens: 8 }], alloc)).get('cold')!.tokens;
      const shared: number[] = [];
      alloc.grow(shared, prefix.length);
      await model.step({ rows: [{ requestId: 'p', tokens: Int32Array.from(prefix), positions: Int32Array.from(prefix, (_, i) => i), blockTable: Int32Array.from(shared), contextLen: 0 }] });
      const table = [...shared];
      const warm: number[] = [];
      let toks = suffix;
      let ctx = prefix.length;
      for (let i = 0; i < 8; i++) {
        alloc.grow(table, ctx + toks.length);
        const r = (await model.step({
          rows: [{ requestId: 'w', tokens: Int32Array.from(toks), positions: Int32Array.from(toks, (_, j) => ctx + j), blockTable: Int32Array.from(table), contextLen: ctx, sample: { ...GREEDY, counter: i } }],
        })).rows[0]!;
        expect(r.error).toBeUndefined();
        warm.push(r.token!);
        ctx += toks.length;
        toks = [r.token!];
      }
      expect(warm).toEqual(cold);
    } finally {
      model.close();
    }
  }, 120_000);
});

describe('capacity and defaults', () => {
  const dir = loadFixture('qwen3-f32').dir;
  const info = (o: Parameters<ReturnType<typeof addon>['loadModel']>[1]) => {
    const m = addon().loadModel(dir, { threads: 1, kvCacheBytes: 8 << 20, ...o });
    try {
      return m.info();
    } finally {
      m.close();
    }
  };

  it('one budget holds 2x f32 tokens in 16 bits and >= 3.5x in int8', () => {
    const blocks = Object.fromEntries(DTYPES.map((d) => [d, info({ kvCacheDtype: d }).numBlocks])) as Record<KvCacheDtype, number>;
    expect(blocks.f16).toBe(2 * blocks.f32);
    expect(blocks.bf16).toBe(2 * blocks.f32);
    expect(blocks.int8).toBeGreaterThanOrEqual(3.5 * blocks.f32);
  });

  it('defaults: f16 on the CPU, f32 under exact precision unless named', () => {
    expect(info({}).kvCacheDtype).toBe('f16');
    expect(info({ precision: 'exact' }).kvCacheDtype).toBe('f32');
    expect(info({ precision: 'exact', kvCacheDtype: 'int8' }).kvCacheDtype).toBe('int8');
  });

  it('an unknown dtype is refused naming the accepted ones', () => {
    expect(() => info({ kvCacheDtype: 'fp8' as KvCacheDtype })).toThrow(/'f32', 'f16', 'bf16' or 'int8', got 'fp8'/);
  });
});

describe('--kv-cache-dtype on the command line and over HTTP', () => {
  async function parse(args: string[]): Promise<{ error: unknown; stderr: string }> {
    let stderr = '';
    const program = new Command('rapid').exitOverride().configureOutput({ writeErr: (s) => (stderr += s), writeOut: () => undefined });
    registerRun(program);
    registerServe(program);
    registerBench(program);
    registerChat(program);
    try {
      await program.parseAsync(['node', 'rapid', ...args]);
      return { error: undefined, stderr };
    } catch (error) {
      return { error, stderr };
    }
  }

  for (const cmd of ['run', 'serve', 'bench', 'chat']) {
    it(`rapid ${cmd} --kv-cache-dtype fp8 fails while parsing, naming the accepted values`, async () => {
      const { error, stderr } = await parse([cmd, 'some-model', '--kv-cache-dtype', 'fp8']);
      expect((error as CommanderError).code).toBe('commander.invalidArgument');
      expect(stderr).toMatch(/--kv-cache-dtype must be f32, f16, bf16 or int8, got "fp8"/);
    });
  }

  it('rapid serve --kv-cache-dtype int8: the pool stores int8 and /metrics says so, with its token capacity', async () => {
    const srv = await startServer(loadFixture('qwen3-f32').dir, { port: 0, threads: 1, kvCacheMemory: 8 << 20, kvCacheDtype: 'int8', servedModelName: 'kv' });
    try {
      expect(srv.model.info.kvCacheDtype).toBe('int8');
      const tokens = srv.model.info.numBlocks * srv.model.info.blockSize;
      const reply = await fetch(`${srv.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'kv', prompt: 'hello there', max_tokens: 4, temperature: 0 }),
      });
      expect(reply.status).toBe(200);
      const text = await (await fetch(`${srv.url}/metrics`)).text();
      expect(text).toContain('rapid_kv_cache_info{model="kv",dtype="int8"} 1');
      expect(text).toContain(`rapid_kv_cache_tokens_total{model="kv"} ${tokens}`);
    } finally {
      await srv.close(1000);
    }
  }, 60_000);
});
