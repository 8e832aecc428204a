// bench:cuda's peer plumbing, without a GPU: llama-batched-bench's table is parsed into S_TG per level
// (a stand-in binary prints the table llama.cpp prints), a level the table lacks is an error, and the
// report states each ratio and the batch-1 bandwidth fraction from the figures it was given.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseBatchedBench, runLlamaPeer } from '../../src/bench/cuda-peers.js';
import { formatReport, summarizeRuns, type CudaBenchReport } from '../../src/bench/cuda.js';

// The format of tools/batched-bench/batched-bench.cpp (header, separator, one row per PP/TG/B).
const TABLE = `
main: n_kv_max = 16384, n_batch = 2048, n_ubatch = 512, flash_attn = -1, is_pp_shared = 0, is_tg_separate = 0, n_gpu_layers = 99, n_threads = 16, n_threads_batch = 16

|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|   128 |    128 |    1 |    256 |    0.012 | 10666.67 |    0.400 |   320.00 |    0.412 |   621.36 |
|   128 |    128 |    8 |   2048 |    0.050 | 20480.00 |    0.800 |  1280.00 |    0.850 |  2409.41 |
|   128 |    128 |   64 |  16384 |    0.400 | 20480.00 |    1.600 |  5120.00 |    2.000 |  8192.00 |
`;

const work = mkdtempSync(join(tmpdir(), 'rapid-cuda-bench-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A stand-in llama-batched-bench that prints `table` (and a version line for --version). */
function fakeBin(table: string): string {
  const dir = mkdtempSync(join(work, 'bin-'));
  const bin = join(dir, 'llama-batched-bench');
  writeFileSync(join(dir, 'table.txt'), table);
  const script = `#!/bin/sh\nif [ "$1" = --version ]; then echo "version: 1 (abc123)" >&2; exit 0; fi\ncat "${dir}/table.txt"\n`;
  writeFileSync(bin, script);
  chmodSync(bin, 0o755);
  return dir;
}

describe('bench:cuda', () => {
  it('parses llama-batched-bench rows and skips the header and separator', () => {
    const rows = parseBatchedBench(TABLE);
    expect(rows.map((r) => [r.pp, r.tg, r.b, r.sTg])).toEqual([
      [128, 128, 1, 320],
      [128, 128, 8, 1280],
      [128, 128, 64, 5120],
    ]);
  });

  it('runs the llama.cpp peer with a context that fits every level and reports S_TG per level', () => {
    const binDir = fakeBin(TABLE);
    const gguf = join(work, 'model.gguf');
    writeFileSync(gguf, Buffer.alloc(1000));
    const run = runLlamaPeer({ binDir, gguf, shape: '0.5b', prompt: 128, gen: 128, levels: [1, 8, 64] });
    expect(run.figures).toEqual([
      { shape: '0.5b', level: 1, tokS: 320 },
      { shape: '0.5b', level: 8, tokS: 1280 },
      { shape: '0.5b', level: 64, tokS: 5120 },
    ]);
    expect(run.command).toContain('-c 16384 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,8,64 -ngl 99');
    expect(run.build).toBe('1 (abc123)');
    expect(run.ggufBytes).toBe(1000);
  });

  it('fails when the table lacks a level (batched-bench skips levels that do not fit)', () => {
    const binDir = fakeBin(TABLE.split('\n').filter((l) => !/\|\s+64 \|/.test(l)).join('\n'));
    const gguf = join(work, 'model.gguf');
    expect(() => runLlamaPeer({ binDir, gguf, shape: '3b', prompt: 128, gen: 128, levels: [1, 64] })).toThrow(/no table row for B=64/);
  });

  it('reports ratios and the batch-1 bandwidth fraction', () => {
    const report: CudaBenchReport = {
      prompt: 128,
      gen: 128,
      levels: [1, 8],
      repeat: 1,
      temperature: 0,
      topP: 1,
      sampledRows: false,
      precision: 'fast',
      peakBandwidth: 4.8e12,
      native: 'build/cuda/rapid_native.node',
      rapid: [
        {
          shape: '0.5b',
          label: 'Qwen2.5-0.5B',
          checkpoint: '/tmp/x',
          weightBytesPerStep: 240e6,
          nativeWeightBytes: 240e6,
          deviceName: 'NVIDIA H200',
          levels: [
            { level: 1, steps: 128, tokS: 1000, msPerStep: 1, forwardMsPerStep: 0.9 },
            { level: 8, steps: 128, tokS: 6000, msPerStep: 1.33, forwardMsPerStep: 1.2 },
          ],
        },
      ],
      llama: [{ shape: '0.5b', command: 'llama-batched-bench', build: 'b1', ggufBytes: 300e6, figures: [{ shape: '0.5b', level: 1, tokS: 500 }, { shape: '0.5b', level: 8, tokS: 3000 }] }],
      errors: [],
    };
    const text = formatReport(report);
    expect(text).toContain('NVIDIA H200');
    expect(text).toContain('(fast), greedy;');
    expect(text).toMatch(/Qwen2\.5-0\.5B\s+1\s+1000\.0\s+500\.0\s+-\s+2\.00x\s+-/);
    expect(text).toMatch(/Qwen2\.5-0\.5B\s+8\s+6000\.0\s+3000\.0\s+-\s+2\.00x\s+-/);
    // 240 MB x 1000/s = 0.24 TB/s = 5.0% of 4.8 TB/s; llama.cpp 300 MB x 500/s = 0.15 TB/s = 3.1%.
    expect(text).toContain('rapid 240.0 MB x 1000.0/s = 0.240 TB/s = 5.0%');
    expect(text).toContain('llama.cpp 300.0 MB x 500.0/s = 0.150 TB/s = 3.1%');
    expect(text).toContain('torch -');
  });
  it('runs llama-batched-bench --repeat times and reports each level as the median of its runs', () => {
    // A stand-in whose S_TG changes on every call: 300, 360, 330 at B=1 (median 330).
    const dir = mkdtempSync(join(work, 'bin-'));
    const bin = join(dir, 'llama-batched-bench');
    const tables = [300, 360, 330].map((b1) => TABLE.replace('|   320.00 |', `|   ${b1}.00 |`));
    tables.forEach((t, i) => writeFileSync(join(dir, `table${i}.txt`), t));
    writeFileSync(join(dir, 'n'), '0');
    const script = [
      '#!/bin/sh',
      'if [ "$1" = --version ]; then echo "version: 1 (abc123)" >&2; exit 0; fi',
      `n=$(cat "${dir}/n"); echo $((n + 1)) > "${dir}/n"`,
      `cat "${dir}/table$n.txt"`,
    ].join('\n');
    writeFileSync(bin, `${script}\n`);
    chmodSync(bin, 0o755);
    const gguf = join(work, 'model.gguf');
    writeFileSync(gguf, Buffer.alloc(10));
    const run = runLlamaPeer({ binDir: dir, gguf, shape: '0.5b', prompt: 128, gen: 128, levels: [1, 8], repeat: 3 });
    expect(run.figures[0]).toEqual({ shape: '0.5b', level: 1, tokS: 330, runs: [300, 360, 330] });
    expect(run.figures[1]).toEqual({ shape: '0.5b', level: 8, tokS: 1280, runs: [1280, 1280, 1280] });
    expect(() => runLlamaPeer({ binDir: dir, gguf, shape: '0.5b', prompt: 128, gen: 128, levels: [1], repeat: 0 })).toThrow(/repeat/);
  });

  it('summarizes repeated rapid runs as medians and keeps their tok/s', () => {
    const f = (tokS: number, ms: number) => ({ level: 8, steps: 128, tokS, msPerStep: ms, forwardMsPerStep: ms / 10 });
    expect(summarizeRuns([f(5000, 1.6)])).toEqual(f(5000, 1.6));
    const s = summarizeRuns([f(6000, 1.33), f(5000, 1.6), f(6400, 1.25)]);
    expect(s).toEqual({ level: 8, steps: 128, tokS: 6000, msPerStep: 1.33, forwardMsPerStep: 0.133, runs: [6000, 5000, 6400] });
    expect(() => summarizeRuns([])).toThrow(/no runs/);
  });

  it('keeps the median share of steps that ran ahead when every run reports it', () => {
    const f = (tokS: number, ahead?: number) => ({ level: 1, steps: 128, tokS, msPerStep: 1, forwardMsPerStep: 0.1, ...(ahead === undefined ? {} : { aheadFraction: ahead }) });
    expect(summarizeRuns([f(1000, 0.97), f(1100, 0.99), f(900, 0.5)]).aheadFraction).toBe(0.97);
    expect(summarizeRuns([f(1000, 0.97), f(1100)]).aheadFraction).toBeUndefined();
  });

  it('reports medians, ratios of medians and each side\'s spread when levels ran several times', () => {
    const report: CudaBenchReport = {
      prompt: 128,
      gen: 128,
      levels: [1],
      repeat: 3,
      temperature: 0.8,
      topP: 0.9,
      sampledRows: false,
      precision: 'fast',
      peakBandwidth: 4.8e12,
      native: 'build/cuda/rapid_native.node',
      rapid: [
        {
          shape: '3b',
          label: 'Qwen2.5-3B',
          checkpoint: '/tmp/x',
          weightBytesPerStep: 1.7e9,
          nativeWeightBytes: 1.7e9,
          deviceName: 'NVIDIA H200',
          levels: [{ level: 1, steps: 128, tokS: 480, msPerStep: 2.08, forwardMsPerStep: 2, runs: [470, 480, 495] }],
        },
      ],
      llama: [{ shape: '3b', command: 'llama-batched-bench', build: 'b1', ggufBytes: 1.8e9, figures: [{ shape: '3b', level: 1, tokS: 400, runs: [390, 400, 410] }] }],
      errors: [],
    };
    const text = formatReport(report);
    expect(text).toContain('median of 3 runs (torch: one)');
    expect(text).toContain('sampling at temperature 0.8, top-p 0.9 (the peers do not sample)');
    expect(text).toMatch(/rapid runs\s+llama\.cpp runs/);
    expect(text).toMatch(/Qwen2\.5-3B\s+1\s+480\.0\s+400\.0\s+-\s+1\.20x\s+-\s+470-495\s+390-410/);
  });

  it('adds the sampled rows: sampled tok/s, sampled/greedy with its round spread, sampled/llama', () => {
    const sampled = { greedyTokS: 1000, sampledTokS: 920, ratio: 0.92, ratioMin: 0.9, ratioMax: 0.95, rounds: 2 };
    const report: CudaBenchReport = {
      prompt: 128,
      gen: 128,
      levels: [1],
      repeat: 1,
      temperature: 0,
      topP: 1,
      sampledRows: true,
      precision: 'fast',
      peakBandwidth: 4.8e12,
      native: 'build/cuda/rapid_native.node',
      rapid: [
        {
          shape: '0.5b',
          label: 'Qwen2.5-0.5B',
          checkpoint: '/tmp/x',
          weightBytesPerStep: 240e6,
          nativeWeightBytes: 240e6,
          deviceName: 'NVIDIA H200',
          levels: [{ level: 1, steps: 128, tokS: 1000, msPerStep: 1, forwardMsPerStep: 0.9, sampled }],
        },
      ],
      llama: [{ shape: '0.5b', command: 'llama-batched-bench', build: 'b1', ggufBytes: 300e6, figures: [{ shape: '0.5b', level: 1, tokS: 500 }] }],
      errors: [],
    };
    const text = formatReport(report);
    expect(text).toMatch(/sampled tok\/s\s+sampled\/greedy\s+sampled\/llama/);
    expect(text).toMatch(/Qwen2\.5-0\.5B\s+1\s+1000\.0\s+500\.0\s+-\s+2\.00x\s+-\s+920\.0\s+0\.92x \(0\.90-0\.95\)\s+1\.84x/);
    expect(summarizeRuns([{ level: 1, steps: 128, tokS: 1000, msPerStep: 1, forwardMsPerStep: 0.9, sampled }, { level: 1, steps: 128, tokS: 1100, msPerStep: 1, forwardMsPerStep: 0.9 }]).sampled).toEqual(sampled);
  });
});
